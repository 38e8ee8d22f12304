package mesh

import (
	"bytes"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
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

// A key whoever else could change is no key of the node's: a symlinked
// key file or directory, a directory others can write, a file someone
// else owns.
func TestKeyFileRefused(t *testing.T) {
	base := t.TempDir()
	other := filepath.Join(base, "other")
	if _, err := LoadOrCreateKey(other); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, want string
		setup      func(dir string) error
	}{
		{"symlinked key file", "symlink", func(dir string) error {
			return os.Symlink(filepath.Join(other, KeyFile), filepath.Join(dir, KeyFile))
		}},
		{"directory others can write", "chmod go-w", func(dir string) error { return os.Chmod(dir, 0o777) }},
	}
	if os.Geteuid() == 0 {
		tests = append(tests, struct {
			name, want string
			setup      func(dir string) error
		}{"key file owned by another user", "owned by uid 65534", func(dir string) error {
			if _, err := LoadOrCreateKey(dir); err != nil {
				return err
			}
			return os.Chown(filepath.Join(dir, KeyFile), 65534, 65534)
		}})
	}
	for i, tt := range tests {
		dir := filepath.Join(base, strconv.Itoa(i))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := tt.setup(dir); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadOrCreateKey(dir); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want refused naming %q", tt.name, err, tt.want)
		}
	}
	linked := filepath.Join(base, "linked")
	if err := os.Symlink(other, linked); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(linked); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("symlinked directory: %v, want refused", err)
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
	conf, err := uapi(priv, 51820, map[Key]bool{k1.Public(): true, k2.Public(): true}, []Peer{stay}, nil)
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

// parseUAPI reads a "set" body as wireguard-go does, into the
// wgtypes.Config it means.
func parseUAPI(t *testing.T, conf string) wgtypes.Config {
	t.Helper()
	var c wgtypes.Config
	var p *wgtypes.PeerConfig
	key := func(v string) wgtypes.Key {
		k, err := parseHexKey(v)
		if err != nil {
			t.Fatal(err)
		}
		return wgtypes.Key(k)
	}
	for line := range strings.Lines(conf) {
		k, v, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
		if !ok {
			t.Fatalf("uapi line %q", line)
		}
		if k == "public_key" {
			c.Peers = append(c.Peers, wgtypes.PeerConfig{PublicKey: key(v)})
			p = &c.Peers[len(c.Peers)-1]
			continue
		}
		if p == nil {
			switch k {
			case "private_key":
				c.PrivateKey = new(key(v))
			case "listen_port":
				n, err := strconv.Atoi(v)
				if err != nil {
					t.Fatal(err)
				}
				c.ListenPort = &n
			default:
				t.Fatalf("device key %q", k)
			}
			continue
		}
		switch k {
		case "endpoint":
			ap, err := netip.ParseAddrPort(v)
			if err != nil {
				t.Fatal(err)
			}
			p.Endpoint = net.UDPAddrFromAddrPort(ap)
		case "persistent_keepalive_interval":
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			p.PersistentKeepaliveInterval = new(time.Duration(n) * time.Second)
		case "replace_allowed_ips":
			p.ReplaceAllowedIPs = v == "true"
		case "remove":
			p.Remove = v == "true"
		case "allowed_ip":
			_, ipnet, err := net.ParseCIDR(v)
			if err != nil {
				t.Fatal(err)
			}
			p.AllowedIPs = append(p.AllowedIPs, *ipnet)
		default:
			t.Fatalf("peer key %q", k)
		}
	}
	return c
}

// TestWgConfigIsUAPI: the configuration the kernel's device gets (wgctrl)
// says what the userspace device's UAPI text says — the same private key,
// port, peers in order with their endpoints, allowed IPs (the mesh
// address alone, then the further ones), keepalive, allowed IPs replaced,
// the gone peers removed — and no ReplacePeers or UpdateOnly.
func TestWgConfigIsUAPI(t *testing.T) {
	t.Parallel()
	key := func() Key {
		k, err := newPrivateKey()
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	priv, k1, k2, k3, k4 := key(), key().Public(), key().Public(), key().Public(), key().Public()
	p1 := Peer{Node: "n1", PublicKey: k1.String(), Endpoint: "192.0.2.1:51820", Address: "10.99.0.1"}
	p2 := Peer{Node: "n2", PublicKey: k2.String(), Endpoint: "198.51.100.7:4000", Address: "10.99.0.2", AllowedIPs: []string{"10.244.2.0/24", "10.245.0.0/16"}}
	p4 := Peer{Node: "n4", PublicKey: k4.String(), Endpoint: "[2001:db8::4]:51820", Address: "fd00:99::4", AllowedIPs: []string{"fd00:244::/64"}}
	for _, c := range []struct {
		name    string
		have    map[Key]bool
		want    []Peer
		removed []Key
		quiet   map[Key]bool
	}{
		{"first", nil, []Peer{p1, p2}, nil, nil},
		{"none", nil, nil, nil, nil},
		{"one gone, one new", map[Key]bool{k1: true, k2: true}, []Peer{p1, p4}, []Key{k2}, nil},
		{"all gone", map[Key]bool{k1: true, k2: true, k3: true}, nil, []Key{k1, k2, k3}, nil},
		{"unchanged", map[Key]bool{k1: true, k2: true, k4: true}, []Peer{p4, p2, p1}, nil, nil},
		{"one quiet", map[Key]bool{k1: true}, []Peer{p1, p2}, nil, map[Key]bool{k2: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			text, err := uapi(priv, 51820, c.have, c.want, c.quiet)
			if err != nil {
				t.Fatal(err)
			}
			got, err := wgConfig(priv, 51820, c.have, c.want, c.quiet)
			if err != nil {
				t.Fatal(err)
			}
			same := cmp.Options{
				cmp.Comparer(func(a, b net.IPNet) bool { return a.String() == b.String() }),
				cmp.Comparer(func(a, b *net.UDPAddr) bool { return a.String() == b.String() }),
			}
			if d := cmp.Diff(parseUAPI(t, text), got, same); d != "" {
				t.Errorf("wgctrl's configuration (+) differs from the UAPI text's (-):\n%s\nUAPI:\n%s", d, text)
			}
			var removed []Key
			for _, p := range got.Peers {
				if p.UpdateOnly {
					t.Errorf("peer %s: UpdateOnly would not add back a wanted peer the device lost", p.PublicKey)
				}
				if p.Remove {
					removed = append(removed, Key(p.PublicKey))
				}
			}
			if got.ReplacePeers {
				t.Error("ReplacePeers breaks the sessions of peers that stay")
			}
			for _, p := range got.Peers {
				if want := map[bool]time.Duration{false: 25 * time.Second, true: 0}[c.quiet[Key(p.PublicKey)]]; !p.Remove && *p.PersistentKeepaliveInterval != want {
					t.Errorf("peer %s: keepalive %s, want %s", p.PublicKey, *p.PersistentKeepaliveInterval, want)
				}
			}
			byKey := cmpopts.SortSlices(func(a, b Key) bool { return a.hex() < b.hex() })
			if d := cmp.Diff(c.removed, removed, byKey, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("peers removed (+got -want):\n%s", d)
			}
		})
	}
}

// TestQuieten: of two nodes given each other as peers, exactly one
// waits; a peer that waits is quiet until a handshake with it or
// quietAtMost, whichever comes first; a peer the device has already is
// never made quiet again, nor a node's new key (at the address its old
// key had).
func TestQuieten(t *testing.T) {
	t.Parallel()
	own, _ := newPrivateKey()
	var before, after Key // peer keys sorting before and after own's public key
	for before == (Key{}) || after == (Key{}) {
		k, _ := newPrivateKey()
		pub, o := k.Public(), own.Public()
		if bytes.Compare(pub[:], o[:]) < 0 {
			before = pub
		} else {
			after = pub
		}
	}
	if o := own.Public(); waits(o, before) == waits(before, o) || waits(o, after) == waits(after, o) || waits(o, o) {
		t.Fatal("waits: want exactly one of two nodes to wait for the other")
	}
	peer := func(k Key) Peer {
		addr := map[bool]string{true: "10.99.0.1", false: "10.99.0.2"}[k == before]
		return Peer{Node: "n" + addr, PublicKey: k.String(), Endpoint: "192.0.2.1:51820", Address: addr}
	}
	rotatedFrom, _ := newPrivateKey()
	wasBefore := peer(rotatedFrom.Public())
	wasBefore.Address = peer(before).Address
	now := time.Unix(1000, 0)
	later := now.Add(time.Second)
	for _, c := range []struct {
		name       string
		before     []Peer
		handshakes map[Key]time.Time
		quiet      map[Key]time.Time
		at         time.Time
		want       map[Key]time.Time
	}{
		{"new", nil, nil, nil, now, map[Key]time.Time{before: now.Add(quietAtMost)}},
		{"rotated", []Peer{wasBefore, peer(after)}, map[Key]time.Time{rotatedFrom.Public(): {}, after: {}}, nil, now, map[Key]time.Time{}},
		{"waiting", nil, map[Key]time.Time{before: {}, after: {}}, map[Key]time.Time{before: now.Add(quietAtMost)}, later, map[Key]time.Time{before: now.Add(quietAtMost)}},
		{"handshake came", nil, map[Key]time.Time{before: later, after: {}}, map[Key]time.Time{before: now.Add(quietAtMost)}, later, map[Key]time.Time{}},
		{"waited enough", nil, map[Key]time.Time{before: {}, after: {}}, map[Key]time.Time{before: now.Add(quietAtMost)}, now.Add(quietAtMost), map[Key]time.Time{}},
		{"had it already", nil, map[Key]time.Time{before: {}, after: {}}, nil, now, map[Key]time.Time{}},
	} {
		if got := quieten(own.Public(), c.before, []Peer{peer(before), peer(after)}, c.handshakes, c.quiet, c.at); !cmp.Equal(got, c.want) {
			t.Errorf("%s: quiet %v, want %v", c.name, got, c.want)
		}
	}
}

// TestRunRefusesUnknownImpl: a library caller's unknown implementation
// is refused before the key is made.
func TestRunRefusesUnknownImpl(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "mesh")
	err := Run(t.Context(), Options{Dir: dir, Address: netip.MustParsePrefix("10.98.0.1/24"), Impl: "wg-go"})
	if err == nil || !strings.Contains(err.Error(), `"wg-go": want auto, kernel or userspace`) {
		t.Errorf("Impl wg-go: %v", err)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("%s made before Impl was checked", dir)
	}
}

// TestNextKey: the next key is made once and kept beside the key (asked
// again, the same one), as safely as the key; committing it makes it the
// key in place of the old one, committing it again does nothing, and a
// key never made next is refused, saying what to do.
func TestNextKey(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "mesh")
	if err := CommitKey(dir, Key{1}); err == nil || !strings.Contains(err.Error(), "transit-mesh rotate -dir "+dir) {
		t.Errorf("commit in a directory that does not exist: %v, want refused saying to ask for a next key", err)
	}
	cur, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	next, err := NextKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if next == cur {
		t.Fatal("the next key is the key")
	}
	fi, err := os.Lstat(filepath.Join(dir, NextKeyFile))
	if err != nil || fi.Mode() != 0o600 {
		t.Fatalf("next key file: %v, mode %v; want a file of mode 0600", err, fi.Mode())
	}
	if again, err := NextKey(dir); err != nil || again != next {
		t.Fatalf("asked again: %v, same key %t", err, again == next)
	}
	if k, err := LoadOrCreateKey(dir); err != nil || k != cur {
		t.Fatalf("the next key changed the key (%v)", err)
	}

	unknown, _ := newPrivateKey()
	if err := CommitKey(dir, unknown.Public()); err == nil || !strings.Contains(err.Error(), "no next key with public key "+unknown.Public().String()) {
		t.Errorf("commit of a key never made: %v, want refused", err)
	}
	if err := CommitKey(dir, next); err == nil {
		t.Error("commit of the next key's private half (not its public one) accepted")
	}
	for i := range 2 {
		if err := CommitKey(dir, next.Public()); err != nil {
			t.Fatalf("commit %d: %v", i+1, err)
		}
		if k, err := LoadOrCreateKey(dir); err != nil || k != next {
			t.Fatalf("after commit %d: the key is not the next one (%v)", i+1, err)
		}
		if _, err := os.Lstat(filepath.Join(dir, NextKeyFile)); !os.IsNotExist(err) {
			t.Errorf("after commit %d the next key file stays: %v", i+1, err)
		}
	}
	if err := CommitKey(dir, cur.Public()); err == nil {
		t.Error("the old key committed back")
	}
	if after, err := NextKey(dir); err != nil || after == next || after == cur {
		t.Errorf("after the commit, a new next key: %v, same as the key %t, as the old key %t", err, after == next, after == cur)
	}
}

// TestNextKeyRefused: a next key whoever else could change is refused as
// the key is (TestKeyFileRefused), when made or read and when committed.
func TestNextKeyRefused(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	other := filepath.Join(base, "other")
	theirs, err := NextKey(other)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, want string
		setup      func(dir string) error
	}{
		{"symlinked next key file", "symlink", func(dir string) error {
			return os.Symlink(filepath.Join(other, NextKeyFile), filepath.Join(dir, NextKeyFile))
		}},
		{"next key others can read", "chmod 600", func(dir string) error {
			if _, err := NextKey(dir); err != nil {
				return err
			}
			return os.Chmod(filepath.Join(dir, NextKeyFile), 0o644)
		}},
		{"directory others can write", "chmod go-w", func(dir string) error { return os.Chmod(dir, 0o777) }},
	}
	if os.Geteuid() == 0 {
		tests = append(tests, struct {
			name, want string
			setup      func(dir string) error
		}{"next key owned by another user", "owned by uid 65534", func(dir string) error {
			if _, err := NextKey(dir); err != nil {
				return err
			}
			return os.Chown(filepath.Join(dir, NextKeyFile), 65534, 65534)
		}})
	}
	for i, tt := range tests {
		dir := filepath.Join(base, strconv.Itoa(i))
		if _, err := LoadOrCreateKey(dir); err != nil {
			t.Fatal(err)
		}
		if err := tt.setup(dir); err != nil {
			t.Fatal(err)
		}
		if _, err := NextKey(dir); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: NextKey: %v, want refused naming %q", tt.name, err, tt.want)
		}
		if err := CommitKey(dir, theirs.Public()); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: CommitKey: %v, want refused naming %q", tt.name, err, tt.want)
		}
		if fi, err := os.Lstat(filepath.Join(dir, KeyFile)); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s: the key file is no longer a file of its own (%v)", tt.name, err)
		}
	}
}
