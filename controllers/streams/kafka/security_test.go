package kafka

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// pki is a CA and what it signs, for brokers and clients.
type pki struct {
	t      *testing.T
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPEM  []byte
	serial int64
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{t: t}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	p.ca, _ = x509.ParseCertificate(der)
	p.caKey, p.caPEM = key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return p
}

// issue signs a certificate for 127.0.0.1 valid until notAfter; it
// returns the PEM certificate and key.
func (p *pki) issue(name string, notAfter time.Time, usage x509.ExtKeyUsage) ([]byte, []byte) {
	p.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		p.t.Fatal(err)
	}
	p.serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(p.serial + 1), Subject: pkix.Name{CommonName: name},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		KeyUsage: x509.KeyUsageDigitalSignature, NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		p.t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		p.t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// secureBroker is a kfake broker with a TLS listener that requires a
// client certificate of p's CA, SASL (SCRAM-SHA-256: the superuser admin,
// and app, who may only read topic "in"), and ACLs on.
func secureBroker(t *testing.T, p *pki) string {
	t.Helper()
	cert, key := p.issue("broker", time.Now().Add(time.Hour), x509.ExtKeyUsageServerAuth)
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
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
	p := newPKI(t)
	addr := secureBroker(t, p)
	clientCert, clientKey := p.issue("client", time.Now().Add(time.Hour), x509.ExtKeyUsageClientAuth)
	good := map[string][]byte{FileCA: p.caPEM, FileCert: clientCert, FileKey: clientKey,
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

	other := newPKI(t)
	otherCert, otherKey := other.issue("client", time.Now().Add(time.Hour), x509.ExtKeyUsageClientAuth)
	expiredCert, expiredKey := p.issue("client", time.Now().Add(-time.Minute), x509.ExtKeyUsageClientAuth)
	for _, tc := range []struct {
		what   string
		change map[string][]byte
		topic  string
		want   string
	}{
		{"a wrong password", map[string][]byte{FilePassword: []byte("guess")}, "out", "it refused the login"},
		{"the broker's CA unknown", map[string][]byte{FileCA: other.caPEM}, "out", "authority the client does not trust"},
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
	p := newPKI(t)
	cert, _ := p.issue("client", time.Now().Add(time.Hour), x509.ExtKeyUsageClientAuth)
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
