package mesh

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKeyFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mesh")
	k, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v; want 0600", err, fi.Mode())
	}
	again, err := LoadOrCreateKey(dir)
	if err != nil || again != k {
		t.Fatalf("second load: %v, same key %t", err, again == k)
	}
	if k.Public() == k || k.Public() == (Key{}) {
		t.Fatal("public key equals the private one or zero")
	}
	if err := os.Chmod(filepath.Join(dir, KeyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a key others can read: %v, want refused with the fix", err)
	}
}

func TestParsePeers(t *testing.T) {
	pub := func() string {
		k, err := newPrivateKey()
		if err != nil {
			t.Fatal(err)
		}
		return k.Public().String()
	}
	a, b := pub(), pub()
	for _, c := range []struct{ in, want string }{
		{`[{"node":"n1","public_key":"` + a + `","endpoint":"192.0.2.1:51820","address":"10.99.0.1"}]`, ""},
		{`[{"node":"n1","public_key":"nope","endpoint":"192.0.2.1:51820","address":"10.99.0.1"}]`, "peers[0] (n1): public_key"},
		{`[{"node":"n1","public_key":"` + a + `","endpoint":"192.0.2.1","address":"10.99.0.1"}]`, "endpoint"},
		{`[{"node":"n1","public_key":"` + a + `","endpoint":"192.0.2.1:1","address":"x"}]`, "address"},
		{`[{"node":"n1","public_key":"` + a + `","endpoint":"192.0.2.1:1","address":"10.99.0.1","allowed_ips":["10.244.1.0"]}]`, "allowed_ips"},
		{`[{"node":"n1","public_key":"` + a + `","endpoint":"192.0.2.1:1","address":"10.99.0.1"},` +
			`{"node":"n2","public_key":"` + b + `","endpoint":"192.0.2.2:1","address":"10.99.0.1"}]`, "peers[1] (n2): its key or address"},
		{`[{"node":"n1","public_key":"` + a + `","endpoint":"192.0.2.1:1","address":"10.99.0.1","private_key":"x"}]`, "unknown field"},
	} {
		_, err := ParsePeers([]byte(c.in))
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.in, err, c.want)
		}
	}
}

// TestUAPIKeepsPeersThatStay: a change sets the peers that stay in place
// (no replace_peers, which would break their sessions) and removes only
// those gone.
func TestUAPIKeepsPeersThatStay(t *testing.T) {
	priv, _ := newPrivateKey()
	k1, _ := newPrivateKey()
	k2, _ := newPrivateKey()
	stay := Peer{Node: "n1", PublicKey: k1.Public().String(), Endpoint: "192.0.2.1:51820", Address: "10.99.0.1"}
	conf, err := uapi(priv, 51820, map[Key]bool{k1.Public(): true, k2.Public(): true}, []Peer{stay})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(conf, "replace_peers") {
		t.Errorf("replace_peers breaks the sessions of peers that stay:\n%s", conf)
	}
	if !strings.Contains(conf, "public_key="+k2.Public().hex()+"\nremove=true\n") || strings.Count(conf, "remove=true") != 1 {
		t.Errorf("want only the gone peer removed:\n%s", conf)
	}
	if !strings.Contains(conf, "public_key="+k1.Public().hex()+"\nendpoint=192.0.2.1:51820\n") || !strings.Contains(conf, "allowed_ip=10.99.0.1/32\n") {
		t.Errorf("the peer that stays is not set:\n%s", conf)
	}
}
