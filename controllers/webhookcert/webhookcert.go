// Package webhookcert keeps an admission webhook's serving certificate
// without cert-manager: a CA and a serving certificate for the webhook
// Service's DNS names live in a Secret, are written to the webhook
// server's certificate directory, and the CA goes into the caBundle of
// the webhook configurations. Every replica runs it: the first creates the
// Secret, the others read it. The serving certificate is renewed with
// the same CA before it expires, so the caBundle never changes under a
// running API server; the CA itself lasts ten years.
package webhookcert

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Keys of the Secret, as kubernetes.io/tls has them plus the CA's.
const (
	keyCACert = "ca.crt"
	keyCAKey  = "ca.key"
	keyCert   = corev1.TLSCertKey
	keyKey    = corev1.TLSPrivateKeyKey
)

// Lifetimes.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	certValidity = 365 * 24 * time.Hour
	// renewBefore: a serving certificate with less left is renewed.
	renewBefore = 30 * 24 * time.Hour
)

// Manager keeps one webhook's certificate.
type Manager struct {
	// Client reads and writes the Secret and the webhook configurations
	// (uncached: it runs before the manager's cache starts).
	Client client.Client
	// Namespace and Secret name the Secret; Service is the webhook's
	// Service in Namespace, whose DNS names the certificate holds.
	Namespace, Secret, Service string
	// CertDir is where tls.crt and tls.key are written.
	CertDir string
	// MutatingWebhookConfigurations get the CA as every webhook's caBundle.
	MutatingWebhookConfigurations []string
	// Now is the clock (time.Now by default).
	Now func() time.Time
}

func (m *Manager) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// Ensure makes the certificate current: created if missing, the serving
// certificate renewed if it expires within 30 days or names the wrong
// Service, the files written, the caBundles set.
func (m *Manager) Ensure(ctx context.Context) error {
	data, err := m.secret(ctx)
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(m.CertDir, keyCert), data[keyCert]); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(m.CertDir, keyKey), data[keyKey]); err != nil {
		return err
	}
	for _, name := range m.MutatingWebhookConfigurations {
		if err := m.setCABundle(ctx, name, data[keyCACert]); err != nil {
			return err
		}
	}
	return nil
}

// Run ensures the certificate now and then every hour until ctx ends
// (a manager.Runnable). A failed renewal is retried at the next tick; the
// old certificate serves meanwhile.
func (m *Manager) Run(ctx context.Context, logf func(format string, args ...any)) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := m.Ensure(ctx); err != nil {
				logf("webhook certificate: %v", err)
			}
		}
	}
}

// dnsNames are the names the API server may use for the Service.
func (m *Manager) dnsNames() []string {
	s, ns := m.Service, m.Namespace
	return []string{s, s + "." + ns, s + "." + ns + ".svc", s + "." + ns + ".svc.cluster.local"}
}

// secret returns the Secret's data, made or renewed as needed.
func (m *Manager) secret(ctx context.Context) (map[string][]byte, error) {
	key := types.NamespacedName{Namespace: m.Namespace, Name: m.Secret}
	for range 5 {
		s := &corev1.Secret{}
		err := m.Client.Get(ctx, key, s)
		switch {
		case apierrors.IsNotFound(err):
			data, err := m.issue(nil)
			if err != nil {
				return nil, err
			}
			s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: m.Secret, Namespace: m.Namespace}, Type: corev1.SecretTypeOpaque, Data: data}
			err = m.Client.Create(ctx, s)
			if apierrors.IsAlreadyExists(err) {
				continue // another replica was first: read its
			}
			return data, err
		case err != nil:
			return nil, fmt.Errorf("webhook certificate: read Secret %s: %w", key, err)
		}
		if m.current(s.Data) {
			return s.Data, nil
		}
		ca, _ := parseCA(s.Data) // a broken CA is replaced: the caBundle follows
		data, err := m.issue(ca)
		if err != nil {
			return nil, err
		}
		s.Data = data
		err = m.Client.Update(ctx, s)
		if apierrors.IsConflict(err) {
			continue // another replica renewed it: read that
		}
		return data, err
	}
	return nil, fmt.Errorf("webhook certificate: Secret %s keeps changing under this replica", key)
}

// current says whether data holds a CA and a serving certificate it
// signed for the Service's names, valid for more than renewBefore.
func (m *Manager) current(data map[string][]byte) bool {
	ca, err := parseCA(data)
	if err != nil {
		return false
	}
	cert, err := parseCert(data[keyCert])
	if err != nil || cert.CheckSignatureFrom(ca.cert) != nil || m.now().Add(renewBefore).After(cert.NotAfter) {
		return false
	}
	if _, err := tlsPair(data[keyCert], data[keyKey]); err != nil {
		return false
	}
	for _, n := range m.dnsNames() {
		if cert.VerifyHostname(n) != nil {
			return false
		}
	}
	return m.now().Add(renewBefore).Before(ca.cert.NotAfter)
}

type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
	kpem []byte
}

// issue makes a serving certificate signed by ca, or by a new CA when ca
// is nil or expires soon.
func (m *Manager) issue(ca *authority) (map[string][]byte, error) {
	now := m.now()
	if ca == nil || now.Add(renewBefore).After(ca.cert.NotAfter) {
		var err error
		if ca, err = newCA(m.Service+"."+m.Namespace+" webhook CA", now); err != nil {
			return nil, err
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: m.Service + "." + m.Namespace + ".svc"},
		DNSNames:     m.dnsNames(),
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		keyCACert: ca.pem,
		keyCAKey:  ca.kpem,
		keyCert:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyKey:    pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	}, nil
}

func newCA(name string, now time.Time) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key,
		pem:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		kpem: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})}, nil
}

func parseCA(data map[string][]byte) (*authority, error) {
	cert, err := parseCert(data[keyCACert])
	if err != nil {
		return nil, err
	}
	b, _ := pem.Decode(data[keyCAKey])
	if b == nil {
		return nil, errors.New("no CA key")
	}
	key, err := x509.ParseECPrivateKey(b.Bytes)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("the CA key does not match its certificate")
	}
	return &authority{cert: cert, key: key, pem: data[keyCACert], kpem: data[keyCAKey]}, nil
}

func parseCert(p []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(p)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("no certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

// setCABundle puts ca into every webhook of the configuration.
func (m *Manager) setCABundle(ctx context.Context, name string, ca []byte) error {
	for range 5 {
		cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := m.Client.Get(ctx, types.NamespacedName{Name: name}, cfg); err != nil {
			return fmt.Errorf("webhook certificate: MutatingWebhookConfiguration %s: %w", name, err)
		}
		changed := false
		for i := range cfg.Webhooks {
			if !bytes.Equal(cfg.Webhooks[i].ClientConfig.CABundle, ca) {
				cfg.Webhooks[i].ClientConfig.CABundle, changed = ca, true
			}
		}
		if !changed {
			return nil
		}
		err := m.Client.Update(ctx, cfg)
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("webhook certificate: MutatingWebhookConfiguration %s keeps changing", name)
}

// writeFile replaces path with data when it differs (the webhook server
// watches the files and reloads).
func writeFile(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// tlsPair checks that a certificate and key belong together.
func tlsPair(cert, key []byte) (tls.Certificate, error) { return tls.X509KeyPair(cert, key) }
