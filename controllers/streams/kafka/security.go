package kafka

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/aws"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Security is how clients reach a Kafka that requires TLS or SASL. It is
// read from the files of a mounted Secret (LoadSecurity), never from an
// object's spec or an environment variable, and String never shows a
// credential.
type Security struct {
	// TLS to the brokers: CA (PEM) signs their certificates (none: the
	// system's roots); Cert and Key (PEM) are a client certificate, for
	// brokers that require one (mTLS).
	TLS           bool
	CA, Cert, Key []byte
	// Mechanism is the SASL mechanism, "" for none: PLAIN,
	// SCRAM-SHA-256, SCRAM-SHA-512 (Username, Password) or AWS_MSK_IAM
	// (Username the access key ID, Password the secret access key,
	// SessionToken for temporary credentials).
	Mechanism                        string
	Username, Password, SessionToken string
}

// The files LoadSecurity reads, as a Secret's keys: each optional.
const (
	FileCA           = "ca.crt"
	FileCert         = "tls.crt"
	FileKey          = "tls.key"
	FileTLS          = "tls" // "true": TLS with the system's roots
	FileMechanism    = "sasl.mechanism"
	FileUsername     = "sasl.username"
	FilePassword     = "sasl.password"
	FileSessionToken = "sasl.session-token"
)

// Mechanisms are the SASL mechanisms Security speaks.
var Mechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "AWS_MSK_IAM"}

// LoadSecurity reads dir's files (a Secret mounted there) and checks them
// (Check). A missing file is a setting not made; a directory that holds
// none is no security at all.
func LoadSecurity(dir string) (Security, error) {
	var unreadable []error
	s := security(func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			unreadable = append(unreadable, err)
		}
		return b
	})
	if len(unreadable) > 0 {
		return Security{}, fmt.Errorf("kafka security in %s: %w", dir, errors.Join(unreadable...))
	}
	if err := s.Check(); err != nil {
		return Security{}, fmt.Errorf("kafka security in %s: %w", dir, err)
	}
	return s, nil
}

// SecurityFromSecret reads a Secret's data (the keys LoadSecurity reads as
// files) and checks it; name is the Secret's, for the error.
func SecurityFromSecret(name string, data map[string][]byte) (Security, error) {
	s := security(func(key string) []byte { return data[key] })
	if err := s.Check(); err != nil {
		return Security{}, fmt.Errorf("kafka security in Secret %s: %w", name, err)
	}
	return s, nil
}

// security reads the keys of a Secret through read.
func security(read func(key string) []byte) Security {
	text := func(name string) string { return strings.TrimSpace(string(read(name))) }
	s := Security{
		CA: read(FileCA), Cert: read(FileCert), Key: read(FileKey),
		Mechanism: strings.ToUpper(text(FileMechanism)),
		Username:  text(FileUsername), Password: text(FilePassword), SessionToken: text(FileSessionToken),
	}
	s.TLS = text(FileTLS) == "true" || len(s.CA) > 0 || len(s.Cert) > 0
	return s
}

// fingerprint tells two Securities apart without showing either (a
// digest of every field), for keying clients.
func (s Security) fingerprint() string {
	h := sha256.New()
	for _, f := range [][]byte{s.CA, s.Cert, s.Key, []byte(s.Mechanism), []byte(s.Username), []byte(s.Password), []byte(s.SessionToken), []byte(strconv.FormatBool(s.TLS))} {
		_, _ = fmt.Fprintf(h, "%d:", len(f))
		h.Write(f)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Check says what is wrong with s, naming the Secret key to fix.
func (s Security) Check() error {
	var errs []error
	if (len(s.Cert) > 0) != (len(s.Key) > 0) {
		errs = append(errs, fmt.Errorf("%s and %s go together (a client certificate and its key)", FileCert, FileKey))
	}
	if len(s.CA) > 0 && !x509.NewCertPool().AppendCertsFromPEM(s.CA) {
		errs = append(errs, fmt.Errorf("%s holds no PEM certificate", FileCA))
	}
	if len(s.Cert) > 0 && len(s.Key) > 0 {
		if _, err := tls.X509KeyPair(s.Cert, s.Key); err != nil {
			errs = append(errs, fmt.Errorf("%s and %s: %w", FileCert, FileKey, err))
		}
	}
	switch s.Mechanism {
	case "":
		if s.Username != "" || s.Password != "" {
			errs = append(errs, fmt.Errorf("%s and %s are set without %s (one of %s)", FileUsername, FilePassword, FileMechanism, strings.Join(Mechanisms, ", ")))
		}
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "AWS_MSK_IAM":
		if s.Username == "" || s.Password == "" {
			errs = append(errs, fmt.Errorf("%s %s needs %s and %s", FileMechanism, s.Mechanism, FileUsername, FilePassword))
		}
	default:
		errs = append(errs, fmt.Errorf("%s %q: want one of %s", FileMechanism, s.Mechanism, strings.Join(Mechanisms, ", ")))
	}
	return errors.Join(errs...)
}

// Opts are the client options that make a franz-go client speak s: none
// for a plaintext listener without SASL.
func (s Security) Opts() ([]kgo.Opt, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	if s.TLS {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if len(s.CA) > 0 {
			cfg.RootCAs = x509.NewCertPool()
			cfg.RootCAs.AppendCertsFromPEM(s.CA)
		}
		if len(s.Cert) > 0 {
			pair, err := tls.X509KeyPair(s.Cert, s.Key)
			if err != nil {
				return nil, err
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if m := s.mechanism(); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

func (s Security) mechanism() sasl.Mechanism {
	switch s.Mechanism {
	case "PLAIN":
		return plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism()
	case "SCRAM-SHA-256":
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism()
	case "SCRAM-SHA-512":
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism()
	case "AWS_MSK_IAM":
		return aws.Auth{AccessKey: s.Username, SecretKey: s.Password, SessionToken: s.SessionToken}.AsManagedStreamingIAMMechanism()
	}
	return nil
}

// String describes s without a credential: "TLS (CA given, client
// certificate), SASL SCRAM-SHA-512 as app".
func (s Security) String() string {
	var parts []string
	if s.TLS {
		var with []string
		if len(s.CA) > 0 {
			with = append(with, "CA given")
		} else {
			with = append(with, "system roots")
		}
		if len(s.Cert) > 0 {
			with = append(with, "client certificate")
		}
		parts = append(parts, "TLS ("+strings.Join(with, ", ")+")")
	}
	if s.Mechanism != "" {
		who := s.Username
		if s.Mechanism == "AWS_MSK_IAM" {
			who = "an access key"
		}
		parts = append(parts, "SASL "+s.Mechanism+" as "+who)
	}
	if len(parts) == 0 {
		return "plaintext"
	}
	return strings.Join(parts, ", ")
}

// Explain turns an error of a client using s, reaching or using Kafka,
// into what to do about it, for a condition or a log: a refused login, a
// certificate the client or the broker does not trust, an expired one, an
// ACL that denies the principal what it asked. Other errors come back as
// they are.
func (s Security) Explain(err error) string {
	if err == nil {
		return ""
	}
	var unknownCA x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var hostname x509.HostnameError
	var ke *kerr.Error
	msg := err.Error()
	switch {
	case errors.As(err, &unknownCA):
		return fmt.Sprintf("the broker's certificate is signed by an authority the client does not trust (%v): put the CA that signs it in the Secret's %s", err, FileCA)
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return fmt.Sprintf("the broker's certificate has expired or is not yet valid (%v): renew it", err)
	case errors.As(err, &hostname):
		return fmt.Sprintf("the broker's certificate does not name the address dialled (%v): dial a name it holds", err)
	case strings.Contains(msg, "remote error: tls: "):
		what := "a client certificate it trusts (the Secret's " + FileCert + " and " + FileKey + ")"
		if strings.Contains(msg, "expired certificate") {
			what = "a client certificate that has not expired: renew the Secret's " + FileCert
		}
		return fmt.Sprintf("the broker refused the TLS handshake (%v): it wants %s", err, what)
	case errors.As(err, &ke) && (ke == kerr.SaslAuthenticationFailed || ke == kerr.IllegalSaslState || ke == kerr.UnsupportedSaslMechanism):
		return fmt.Sprintf("the broker refused the login (%v): check the Secret's %s, %s and %s", err, FileMechanism, FileUsername, FilePassword)
	case s.Mechanism != "" && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
		// Some brokers (kfake) close the connection on a failed login
		// instead of answering SASL_AUTHENTICATION_FAILED.
		return fmt.Sprintf("the broker closed the connection at the %s login (%v): it refused the login, or the listener speaks no SASL; check the Secret's %s, %s and %s", s.Mechanism, err, FileMechanism, FileUsername, FilePassword)
	case errors.As(err, &ke) && strings.HasSuffix(ke.Message, "_AUTHORIZATION_FAILED"):
		return fmt.Sprintf("an ACL denies %s (%v): grant it what the pipeline needs (READ on its inputs and groups, WRITE on its outputs and dead-letter topic, WRITE and DESCRIBE on its transactional IDs for exactly-once)", s.principal(), err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("no answer (%v): a plaintext client to a TLS listener (or the reverse) waits like this; check that the Secret's TLS settings match the listener", err)
	}
	return msg
}

// principal is who the broker sees, for a message.
func (s Security) principal() string {
	switch s.Mechanism {
	case "":
		return "the principal"
	case "AWS_MSK_IAM":
		return "the access key's principal"
	}
	return "User:" + s.Username
}
