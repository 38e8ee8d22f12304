package webhookcert

import (
	"bytes"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/cloudtransit/transit/controllers/testenv"
)

// TestEnsure on the real API server: the first replica makes the CA and
// serving certificate, writes them and sets the caBundle; a second one
// takes the same; near expiry the serving certificate is renewed under
// the same CA (the caBundle stays); a broken Secret is replaced.
func TestEnsure(t *testing.T) {
	e := testenv.Start(t, testenv.Options{})
	ctx := t.Context()
	c := e.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "transit-relations"}}); err != nil {
		t.Fatal(err)
	}
	path := "/mutate"
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "hook"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "a.example.com",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "transit-relations", Name: "webhook", Path: &path}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"}}}}
	if err := c.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	replica := func(dir string) *Manager {
		return &Manager{Client: c, Namespace: "transit-relations", Secret: "webhook-cert", Service: "webhook", CertDir: dir,
			MutatingWebhookConfigurations: []string{"hook"}, Now: func() time.Time { return now }}
	}
	a, b := replica(t.TempDir()), replica(t.TempDir())
	if err := a.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	secret := func() *corev1.Secret {
		s := &corev1.Secret{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: "transit-relations", Name: "webhook-cert"}, s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := secret()
	caBundle := func() []byte {
		got := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := c.Get(ctx, types.NamespacedName{Name: "hook"}, got); err != nil {
			t.Fatal(err)
		}
		return got.Webhooks[0].ClientConfig.CABundle
	}
	if !bytes.Equal(caBundle(), first.Data[keyCACert]) {
		t.Fatal("the caBundle is not the CA")
	}
	checkServes(t, a.CertDir, first.Data[keyCACert], now)

	if err := b.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if s := secret(); s.ResourceVersion != first.ResourceVersion {
		t.Error("a second replica rewrote a current Secret")
	}
	cert, _ := os.ReadFile(filepath.Join(b.CertDir, keyCert))
	if !bytes.Equal(cert, first.Data[keyCert]) {
		t.Error("the second replica serves another certificate")
	}

	// 340 days on: renewed, same CA, the caBundle untouched.
	now = now.Add(340 * 24 * time.Hour)
	if err := b.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	renewed := secret()
	if bytes.Equal(renewed.Data[keyCert], first.Data[keyCert]) || !bytes.Equal(renewed.Data[keyCACert], first.Data[keyCACert]) {
		t.Error("near expiry: want a new serving certificate under the same CA")
	}
	checkServes(t, b.CertDir, first.Data[keyCACert], now)
	if !bytes.Equal(caBundle(), first.Data[keyCACert]) {
		t.Error("a renewal changed the caBundle")
	}

	// A broken Secret is replaced, and the caBundle follows the new CA.
	broken := secret()
	broken.Data[keyCAKey] = []byte("garbage")
	if err := c.Update(ctx, broken); err != nil {
		t.Fatal(err)
	}
	if err := a.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	fixed := secret()
	if bytes.Equal(fixed.Data[keyCACert], first.Data[keyCACert]) || !bytes.Equal(caBundle(), fixed.Data[keyCACert]) {
		t.Error("a broken CA: want a new CA in the Secret and the caBundle")
	}
	checkServes(t, a.CertDir, fixed.Data[keyCACert], now)
}

// checkServes verifies the written certificate for the Service's names
// against ca at now.
func checkServes(t *testing.T, dir string, ca []byte, now time.Time) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, keyCert))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := parseCert(data)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	for _, n := range []string{"webhook.transit-relations.svc", "webhook.transit-relations.svc.cluster.local"} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: n, Roots: roots, CurrentTime: now}); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	key, err := os.ReadFile(filepath.Join(dir, keyKey))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tlsPair(data, key); err != nil {
		t.Error(err)
	}
}
