package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cloudtransit/transit/testpki"
)

// issue signs a certificate for 127.0.0.1 valid until notAfter; it
// returns the PEM certificate and key.
func issue(ca *testpki.CA, name string, notAfter time.Time, usage x509.ExtKeyUsage) ([]byte, []byte) {
	c := ca.Issue(testpki.Leaf{Name: name, IPs: testpki.Loopback, NotAfter: notAfter, Usage: []x509.ExtKeyUsage{usage}})
	return c.CertPEM, c.KeyPEM
}

// secureBroker is a kfake broker with a TLS listener that requires a
// client certificate of p's CA, SASL (SCRAM-SHA-256: the superuser admin,
// and app, who may only read topic "in"), and ACLs on.
func secureBroker(t *testing.T, p *testpki.CA) string {
	t.Helper()
	cert, key := issue(p, "broker", time.Now().Add(time.Hour), x509.ExtKeyUsageServerAuth)
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(p.Cert)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in", "out"),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}),
		kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "admin", "admin-secret"),
		kfake.EnableACLs(),
		kfake.User("SCRAM-SHA-256", "app", "app-secret",
			kfake.ACL{Allow: true, Resource: kmsg.ACLResourceTypeTopic, Name: "in", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationRead},
			kfake.ACL{Allow: true, Resource: kmsg.ACLResourceTypeTopic, Name: "in", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationDescribe}),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}

// secretDir writes a Secret's keys as files, as a mounted Secret is.
func secretDir(t *testing.T, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// produceWith reaches the broker and produces one record to topic with
// s, and returns the error.
func produceWith(t *testing.T, addr string, s Security, topic string) error {
	t.Helper()
	opts, err := s.Opts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(addr), kgo.RequestRetries(0), kgo.RetryTimeout(3*time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// What the controller's and the sidecar's first request meets: a
	// refused handshake or login comes back as it is, where a produce
	// retries it until its deadline.
	if err := cl.Ping(ctx); err != nil {
		return err
	}
	return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("x")}).FirstErr()
}

// A client with the mounted Secret's TLS and SASL settings reaches a
// broker that requires both; each way to get them wrong is explained,
// naming what to fix, and no explanation or description shows a secret.
func TestSecurity(t *testing.T) {
	p := testpki.NewCA(t, "test CA")
	addr := secureBroker(t, p)
	clientCert, clientKey := issue(p, "client", time.Now().Add(time.Hour), x509.ExtKeyUsageClientAuth)
	good := map[string][]byte{FileCA: p.PEM, FileCert: clientCert, FileKey: clientKey,
		FileMechanism: []byte("scram-sha-256\n"), FileUsername: []byte("admin"), FilePassword: []byte("admin-secret\n")}
	load := func(change map[string][]byte) Security {
		files := map[string][]byte{}
		for k, v := range good {
			files[k] = v
		}
		for k, v := range change {
			if v == nil {
				delete(files, k)
				continue
			}
			files[k] = v
		}
		s, err := LoadSecurity(secretDir(t, files))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := load(nil)
	if err := produceWith(t, addr, s, "out"); err != nil {
		t.Fatalf("with the Secret's settings: %v", err)
	}
	if got := s.String(); got != "TLS (CA given, client certificate), SASL SCRAM-SHA-256 as admin" {
		t.Errorf("String: %q", got)
	}

	other := testpki.NewCA(t, "test CA")
	otherCert, otherKey := issue(other, "client", time.Now().Add(time.Hour), x509.ExtKeyUsageClientAuth)
	expiredCert, expiredKey := issue(p, "client", time.Now().Add(-time.Minute), x509.ExtKeyUsageClientAuth)
	for _, tc := range []struct {
		what   string
		change map[string][]byte
		topic  string
		want   string
	}{
		{"a wrong password", map[string][]byte{FilePassword: []byte("guess")}, "out", "it refused the login"},
		{"the broker's CA unknown", map[string][]byte{FileCA: other.PEM}, "out", "authority the client does not trust"},
		{"a client certificate of another CA", map[string][]byte{FileCert: otherCert, FileKey: otherKey}, "out", "refused the TLS handshake"},
		{"an expired client certificate", map[string][]byte{FileCert: expiredCert, FileKey: expiredKey}, "out", "has not expired: renew"},
		{"an ACL that denies writing", map[string][]byte{FileUsername: []byte("app"), FilePassword: []byte("app-secret")}, "in", "an ACL denies User:app"},
	} {
		err := produceWith(t, addr, load(tc.change), tc.topic)
		if err == nil {
			t.Errorf("%s: the produce succeeded", tc.what)
			continue
		}
		got := load(tc.change).Explain(err)
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: explained %q, want %q", tc.what, got, tc.want)
		}
		for _, secret := range []string{"admin-secret", "app-secret", "guess"} {
			if strings.Contains(got, secret) {
				t.Errorf("%s: the explanation shows a password", tc.what)
			}
		}
	}
}

// A Secret that cannot work is refused when it is read, naming its key.
func TestSecurityRefused(t *testing.T) {
	p := testpki.NewCA(t, "test CA")
	cert, _ := issue(p, "client", time.Now().Add(time.Hour), x509.ExtKeyUsageClientAuth)
	for _, tc := range []struct {
		files map[string][]byte
		want  string
	}{
		{map[string][]byte{FileCert: cert}, "tls.crt and tls.key go together"},
		{map[string][]byte{FileCA: []byte("not pem")}, "ca.crt holds no PEM certificate"},
		{map[string][]byte{FileCert: cert, FileKey: cert}, "tls.crt and tls.key:"},
		{map[string][]byte{FileMechanism: []byte("GSSAPI"), FileUsername: []byte("u"), FilePassword: []byte("p")}, `sasl.mechanism "GSSAPI": want one of PLAIN`},
		{map[string][]byte{FileMechanism: []byte("PLAIN"), FileUsername: []byte("u")}, "needs sasl.username and sasl.password"},
		{map[string][]byte{FileUsername: []byte("u"), FilePassword: []byte("p")}, "set without sasl.mechanism"},
	} {
		_, err := LoadSecurity(secretDir(t, tc.files))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", keys(tc.files), err, tc.want)
		}
	}
	// A key that cannot be read is an error, never a setting left out.
	unreadable := t.TempDir()
	if err := os.Mkdir(filepath.Join(unreadable, FilePassword), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSecurity(unreadable); err == nil || !strings.Contains(err.Error(), FilePassword) {
		t.Errorf("an unreadable %s: got %v, want an error naming it", FilePassword, err)
	}
	s, err := LoadSecurity(t.TempDir())
	if err != nil || s.String() != "plaintext" {
		t.Errorf("an empty directory: %v, %v; want plaintext", s, err)
	}
	if opts, _ := s.Opts(); len(opts) != 0 {
		t.Errorf("plaintext has %d options", len(opts))
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
