// Package testpki issues certificates for tests: a CA and the server and
// client certificates it signs, ECDSA P-256, in the forms the tests hand
// to servers and clients (parsed and PEM).
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority valid from an hour ago for an hour.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	PEM  []byte // the certificate

	tb     testing.TB
	serial atomic.Int64
}

// NewCA makes a CA named name.
func NewCA(tb testing.TB, name string) *CA {
	tb.Helper()
	ca := &CA{tb: tb}
	ca.serial.Store(1)
	key := newKey(tb)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	ca.Cert, ca.Key, ca.PEM = parse(tb, der), key, pemBlock("CERTIFICATE", der)
	return ca
}

// Leaf is what a certificate is issued for.
type Leaf struct {
	Name string
	IPs  []net.IP
	// NotAfter defaults to an hour from now; the certificate is valid
	// from two hours ago.
	NotAfter time.Time
	// Usage defaults to both server and client authentication.
	Usage []x509.ExtKeyUsage
}

// Issued is a certificate and its key.
type Issued struct {
	Cert    *x509.Certificate
	CertPEM []byte
	Key     *ecdsa.PrivateKey
	KeyPEM  []byte // "EC PRIVATE KEY"
}

// Issue signs a certificate for l.
func (ca *CA) Issue(l Leaf) Issued {
	ca.tb.Helper()
	if l.NotAfter.IsZero() {
		l.NotAfter = time.Now().Add(time.Hour)
	}
	if l.Usage == nil {
		l.Usage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	key := newKey(ca.tb)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(ca.serial.Add(1)), Subject: pkix.Name{CommonName: l.Name},
		IPAddresses: l.IPs, ExtKeyUsage: l.Usage, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: l.NotAfter}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		ca.tb.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		ca.tb.Fatal(err)
	}
	return Issued{Cert: parse(ca.tb, der), CertPEM: pemBlock("CERTIFICATE", der), Key: key, KeyPEM: pemBlock("EC PRIVATE KEY", kder)}
}

// Loopback is 127.0.0.1, the address test servers serve on.
var Loopback = []net.IP{net.IPv4(127, 0, 0, 1)}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return key
}

func parse(tb testing.TB, der []byte) *x509.Certificate {
	tb.Helper()
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return cert
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
