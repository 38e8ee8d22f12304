package seal_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/cloudtransit/transit/statestore/seal"
)

func TestRoundTrip(t *testing.T) {
	k, text, err := seal.Generate()
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n")
	sealed, err := k.Seal(secret)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("secret")) || !seal.Sealed(sealed) || seal.Sealed(secret) {
		t.Fatalf("sealed data shows the secret or is not recognised: %q", sealed)
	}
	again, err := seal.Parse(" " + text + "\n")
	if err != nil {
		t.Fatal(err)
	}
	got, err := again.Open(sealed)
	if err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("open: %q, %v", got, err)
	}
	if again.Recipient() != k.Recipient() || !strings.HasPrefix(k.Recipient(), "age1") {
		t.Fatalf("recipients %q, %q", again.Recipient(), k.Recipient())
	}
}

func TestWrongKeyAndDamage(t *testing.T) {
	k, _, _ := seal.Generate()
	other, _, _ := seal.Generate()
	sealed, err := k.Seal([]byte("kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Open(sealed); !errors.Is(err, seal.ErrWrongKey) {
		t.Fatalf("open with another key: %v, want ErrWrongKey", err)
	}
	damaged := bytes.Clone(sealed)
	damaged[len(damaged)-3] ^= 1
	if _, err := k.Open(damaged); err == nil || errors.Is(err, seal.ErrWrongKey) {
		t.Fatalf("open damaged: %v, want a damage error", err)
	}
	if _, err := k.Open([]byte("plain text")); err == nil {
		t.Fatal("opened plain text")
	}
}

func TestParseRefusesWithoutEcho(t *testing.T) {
	for _, text := range []string{"", "hunter2hunter2", "AGE-SECRET-KEY-1NOTAKEYNOTAKEY"} {
		_, err := seal.Parse(text)
		if err == nil {
			t.Fatalf("Parse(%q): no error", text)
		}
		if text != "" && strings.Contains(err.Error(), text) {
			t.Fatalf("the error repeats the key: %v", err)
		}
	}
}
