package gce

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cloudtransit/transit/cloudsim"
)

// TokenPath is the token endpoint's path: a service account key's
// token_uri is the emulator's URL plus TokenPath.
const TokenPath = "/token"

// tokenTTL is how long an access token is good for.
const tokenTTL = time.Hour

// jwtBearer is the OAuth 2.0 grant a service account uses (RFC 7523).
const jwtBearer = "urn:ietf:params:oauth:grant-type:jwt-bearer"

// serveToken exchanges a service account's signed assertion for an
// access token, as oauth2.googleapis.com/token does.
func (s *Server) serveToken(w http.ResponseWriter, r *http.Request, body []byte) {
	refuse := func(desc string) {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant", "error_description": desc})
	}
	if r.Method != http.MethodPost {
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "invalid_request"})
		return
	}
	form, err := url.ParseQuery(string(body))
	if err != nil || form.Get("grant_type") != jwtBearer {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "unsupported_grant_type", "error_description": "Invalid grant_type: " + form.Get("grant_type")})
		return
	}
	if f, ok := s.sim.Faults.Take(cloudsim.OpAuth); ok {
		switch f.Kind {
		case cloudsim.FaultThrottle:
			writeJSON(w, http.StatusTooManyRequests, map[string]string{"error": "rate_limit_exceeded"})
			return
		case cloudsim.FaultServer, cloudsim.FaultLost:
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "internal_failure"})
			return
		case cloudsim.FaultSlow:
			if err := cloudsim.SleepWall(r.Context(), f.Delay); err != nil {
				return
			}
		default:
			refuse("Invalid JWT Signature.")
			return
		}
	}
	account, err := s.verifyJWT(form.Get("assertion"))
	if err != nil {
		refuse(err.Error())
		return
	}
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	tok := "ya29.cloudsim-" + hex.EncodeToString(b)
	s.mu.Lock()
	s.tokens[tok] = account
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"access_token": tok, "expires_in": int(tokenTTL.Seconds()) - 1, "token_type": "Bearer"})
}

// Authorized checks the request's bearer token: one the token endpoint
// issued, or a JWT a known service account signed. Google's other APIs
// the emulator serves beside Compute Engine (cloudsim/gcebilling) take
// the same tokens, as Google's do.
func (s *Server) Authorized(r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return false
	}
	s.mu.Lock()
	_, issued := s.tokens[tok]
	open := s.opts.Accounts == nil
	s.mu.Unlock()
	if issued || open {
		return true
	}
	_, err := s.verifyJWT(tok)
	return err == nil
}

// verifyJWT checks an RS256 JWT signed by a known service account and
// returns the account.
func (s *Server) verifyJWT(tok string) (string, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "", errors.New("invalid JWT: not a JWT")
	}
	var header struct {
		Alg string `json:"alg"`
	}
	var claims struct {
		Iss string `json:"iss"`
		Exp int64  `json:"exp"`
		Iat int64  `json:"iat"`
	}
	if err := decodeSegment(parts[0], &header); err != nil || header.Alg != "RS256" {
		return "", errors.New("invalid JWT: bad header")
	}
	if err := decodeSegment(parts[1], &claims); err != nil {
		return "", errors.New("invalid JWT: bad claims")
	}
	s.mu.Lock()
	pub, ok := s.opts.Accounts[claims.Iss]
	open := s.opts.Accounts == nil
	s.mu.Unlock()
	if !ok {
		if open {
			return claims.Iss, nil
		}
		return "", errors.New("invalid JWT signature")
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return "", errors.New("invalid JWT signature")
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sig) != nil {
		return "", errors.New("invalid JWT signature")
	}
	if now := time.Now().Unix(); claims.Exp < now-60 || claims.Iat > now+300 {
		return "", errors.New("invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe")
	}
	return claims.Iss, nil
}

func decodeSegment(seg string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// serviceAccountKey is a service account key file's JSON.
type serviceAccountKey struct {
	Type         string `json:"type"`
	ProjectID    string `json:"project_id"`
	PrivateKeyID string `json:"private_key_id"`
	PrivateKey   string `json:"private_key"`
	ClientEmail  string `json:"client_email"`
	ClientID     string `json:"client_id"`
	AuthURI      string `json:"auth_uri"`
	TokenURI     string `json:"token_uri"`
}

// ParseKey reads a service account key file: its account and public key.
func ParseKey(keyJSON []byte) (string, *rsa.PublicKey, error) {
	var k serviceAccountKey
	if err := json.Unmarshal(keyJSON, &k); err != nil {
		return "", nil, fmt.Errorf("service account key: %w", err)
	}
	if k.Type != "service_account" || k.ClientEmail == "" {
		return "", nil, errors.New("service account key: want type service_account with a client_email")
	}
	block, _ := pem.Decode([]byte(k.PrivateKey))
	if block == nil {
		return "", nil, errors.New("service account key: private_key is not PEM")
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return "", nil, fmt.Errorf("service account key: private_key: %w", err)
	}
	rk, ok := key.(*rsa.PrivateKey)
	if !ok {
		return "", nil, errors.New("service account key: private_key is not RSA")
	}
	return k.ClientEmail, &rk.PublicKey, nil
}

// NewKey makes a service account key file for account in project whose
// token_uri is tokenURI (the emulator's URL plus TokenPath).
func NewKey(project, account, tokenURI string) ([]byte, error) {
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(rk)
	if err != nil {
		return nil, err
	}
	id := make([]byte, 20)
	_, _ = rand.Read(id)
	return json.MarshalIndent(serviceAccountKey{
		Type: "service_account", ProjectID: project, PrivateKeyID: hex.EncodeToString(id),
		PrivateKey:  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		ClientEmail: account, ClientID: "100000000000000000001",
		AuthURI: "https://accounts.google.com/o/oauth2/auth", TokenURI: tokenURI,
	}, "", "  ")
}
