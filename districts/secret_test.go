package districts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The secret and its parts; none may show up anywhere.
const secretValue = "Zq9w-S3CR3T-xY7k"

var secretParts = []string{secretValue, "Zq9w", "S3CR3T", "xY7k"}

func assertNoSecret(t *testing.T, what, s string) {
	t.Helper()
	for _, part := range secretParts {
		if strings.Contains(s, part) {
			t.Errorf("%s shows secret part %q:\n%s", what, part, s)
		}
	}
}

func secretCredential() Credential {
	return Credential{
		Type: "credential", ID: "aws_default", Provider: "aws",
		AWSAccessKeyID: "AKID", AWSSecretAccessKey: secretValue, AWSSessionToken: secretValue,
		OSPassword: secretValue, OSApplicationCredentialSecret: secretValue,
	}
}

func TestSecretsNeverPrint(t *testing.T) {
	t.Parallel()
	c := secretCredential()
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T %v"} {
		for name, v := range map[string]any{"value": c, "pointer": &c, "slice": []Credential{c}, "secret": c.AWSSecretAccessKey} {
			assertNoSecret(t, fmt.Sprintf("fmt %s of %s", verb, name), fmt.Sprintf(verb, v))
		}
	}
	out, err := json.Marshal([]Credential{c})
	if err != nil {
		t.Fatal(err)
	}
	assertNoSecret(t, "json", string(out))

	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("c", "credential", c, "secret", c.OSPassword)
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("c", "credential", c, "secret", c.OSPassword)
	assertNoSecret(t, "slog", buf.String())

	if c.AWSSecretAccessKey.Reveal() != secretValue {
		t.Error("Reveal does not return the value")
	}
}

// Every way credentials.json can be wrong names the file and place but
// never quotes the secret, not even one character of it.
func TestSecretsNeverInErrors(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"unquoted secret":           `[{"type": "credential", "id": "a", "provider": "aws", "aws_secret_access_key": ` + secretValue + `}]`,
		"control character":         "[{\"aws_secret_access_key\": \"" + secretValue + "\x01\"}]",
		"newline in string":         "[{\"aws_secret_access_key\": \"" + secretValue + "\n\"}]",
		"unterminated":              `[{"aws_secret_access_key": "` + secretValue,
		"bad escape":                `[{"aws_secret_access_key": "` + secretValue + `\q"}]`,
		"missing comma":             `[{"aws_secret_access_key": "` + secretValue + `" "id": "a"}]`,
		"secret as key":             `[{"` + secretValue + `": "x"}]`,
		"secret as duplicated key":  `[{"` + secretValue + `": "x", "` + secretValue + `": "y"}]`,
		"number":                    `[{"aws_secret_access_key": 12345678}]`,
		"object":                    `[{"aws_secret_access_key": {"v": "` + secretValue + `"}}]`,
		"wrong top level":           `{"aws_secret_access_key": "` + secretValue + `"}`,
		"secret for other provider": `[{"type": "credential", "id": "g", "provider": "gce", "aws_secret_access_key": "` + secretValue + `", "os_password": "` + secretValue + `"}]`,
		"secret without key id":     `[{"type": "credential", "id": "a", "provider": "aws", "aws_secret_access_key": "` + secretValue + `"}]`,
		"trailing garbage":          `[] ` + secretValue,
	}
	for name, src := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := stage(t, kratzkeDir+"/cluster.json", kratzkeDir+"/districts.json", kratzkeDir+"/credentials.json")
			if err := os.WriteFile(p.Credentials, []byte(src), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(p)
			if err == nil {
				t.Fatal("Load succeeded")
			}
			msg := err.Error()
			if !strings.Contains(msg, "credentials.json: ") {
				t.Errorf("error does not name credentials.json:\n%s", msg)
			}
			assertNoSecret(t, "error", msg)
			if strings.Contains(msg, "'") { // encoding/json quotes the offending character so
				t.Errorf("error quotes a character of the file:\n%s", msg)
			}
			out, _ := json.Marshal(err)
			assertNoSecret(t, "error as JSON", string(out))
		})
	}
}

// Validate works on values; its messages name keys, never secret values.
func TestSecretsNeverInValidation(t *testing.T) {
	t.Parallel()
	cfg := validConfig()
	c := secretCredential()
	c.Provider = "gce"
	cfg.Credentials = append(cfg.Credentials, c, Credential{ID: "x", Provider: "openstack", OSApplicationCredentialSecret: secretValue})
	err := Validate(cfg)
	if err == nil {
		t.Fatal("Validate succeeded")
	}
	assertNoSecret(t, "Validate error", err.Error())
}

func TestSecretFileIsNotReadWhenExposed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "credentials.json")
	if err := os.WriteFile(p, []byte(`[{"aws_secret_access_key": `+secretValue+`]`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	c := newProblems("credentials.json", nil)
	var creds []Credential
	if readCredentials(c, p, &creds) {
		t.Fatal("read a group-readable credentials file")
	}
	// Only the mode problem: the malformed content was never looked at.
	if len(c.list) != 1 || !strings.HasPrefix(c.list[0].Message, "mode 0644") {
		t.Errorf("problems = %v, want just the mode", c.list)
	}
}
