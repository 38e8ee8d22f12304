package openstack

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"time"

	"github.com/cloudtransit/transit/cloudsim"
)

// token is what Keystone issued.
type token struct {
	project string
	expires time.Time
}

// project is the project a token is scoped to, and whether Keystone issued
// it and it has not expired.
func (s *Server) project(t string) (string, bool) {
	if t == "" {
		return "", false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tok, ok := s.tokens[t]
	if ok && !s.sim.Time().Before(tok.expires) {
		delete(s.tokens, t)
		return "", false
	}
	return tok.project, ok
}

type authBody struct {
	Auth struct {
		Identity struct {
			Methods  []string `json:"methods"`
			Password *struct {
				User struct {
					ID       string `json:"id"`
					Name     string `json:"name"`
					Password string `json:"password"`
					Domain   *struct {
						ID   string `json:"id"`
						Name string `json:"name"`
					} `json:"domain"`
				} `json:"user"`
			} `json:"password"`
			ApplicationCredential *struct {
				ID     string `json:"id"`
				Name   string `json:"name"`
				Secret string `json:"secret"`
			} `json:"application_credential"`
		} `json:"identity"`
		Scope *struct {
			Project *struct {
				ID     string `json:"id"`
				Name   string `json:"name"`
				Domain *struct {
					ID   string `json:"id"`
					Name string `json:"name"`
				} `json:"domain"`
			} `json:"project"`
		} `json:"scope"`
	} `json:"auth"`
}

// serveIdentity answers Keystone: version discovery at /identity and
// /identity/v3, and token issue at /identity/v3/auth/tokens.
func (s *Server) serveIdentity(w http.ResponseWriter, r *http.Request, base, path string, body []byte) {
	v3 := map[string]any{"id": "v3.14", "status": "stable", "updated": "2020-04-07T00:00:00Z",
		"links":       []map[string]string{{"rel": "self", "href": base + "/identity/v3/"}},
		"media-types": []map[string]string{{"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}}}
	switch {
	case r.Method == "GET" && (path == "" || path == "/"):
		writeJSON(w, http.StatusMultipleChoices, map[string]any{"versions": map[string]any{"values": []any{v3}}})
	case r.Method == "GET" && (path == "/v3" || path == "/v3/"):
		writeJSON(w, http.StatusOK, map[string]any{"version": v3})
	case r.Method == "POST" && path == "/v3/auth/tokens":
		if _, _, ok := s.fault(r.Context(), w, identity, cloudsim.OpAuth, ""); !ok {
			return
		}
		s.issueToken(w, base, body)
	default:
		writeError(w, identity, &apiError{404, "Not Found", "The resource could not be found."})
	}
}

func (s *Server) issueToken(w http.ResponseWriter, base string, body []byte) {
	var b authBody
	if err := json.Unmarshal(body, &b); err != nil {
		writeError(w, identity, &apiError{400, "Bad Request", "Expecting to find auth in request body. " + err.Error()})
		return
	}
	id := b.Auth.Identity
	project, user, method := "", "", ""
	switch {
	case id.Password != nil:
		method = "password"
		u := id.Password.User
		domain := "Default"
		if u.Domain != nil && u.Domain.Name != "" {
			domain = u.Domain.Name
		} else if u.Domain != nil && u.Domain.ID != "" && u.Domain.ID != "default" {
			domain = u.Domain.ID
		}
		if s.opts.Users == nil && s.opts.AppCredentials == nil {
			project, user = "demo", u.Name
			break
		}
		for _, known := range s.opts.Users {
			kd := known.Domain
			if kd == "" {
				kd = "Default"
			}
			if known.Name == u.Name && kd == domain && subtle.ConstantTimeCompare([]byte(known.Password), []byte(u.Password)) == 1 {
				project, user = known.Project, known.Name
			}
		}
		if project != "" && b.Auth.Scope != nil && b.Auth.Scope.Project != nil {
			if p := b.Auth.Scope.Project; p.Name != "" && p.Name != project || p.ID != "" && p.ID != projectID(project) {
				writeError(w, identity, unauthorized())
				return
			}
		}
	case id.ApplicationCredential != nil:
		method = "application_credential"
		ac := id.ApplicationCredential
		if s.opts.Users == nil && s.opts.AppCredentials == nil {
			project, user = "demo", "app-"+ac.ID
			break
		}
		for _, known := range s.opts.AppCredentials {
			if known.ID == ac.ID && subtle.ConstantTimeCompare([]byte(known.Secret), []byte(ac.Secret)) == 1 {
				project, user = known.Project, "app-"+known.ID
			}
		}
	default:
		writeError(w, identity, &apiError{400, "Bad Request", "Expecting to find identity in auth."})
		return
	}
	if project == "" {
		writeError(w, identity, unauthorized())
		return
	}
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	tokenID := "gAAAAA" + hex.EncodeToString(raw[:])
	now := s.sim.Time().UTC()
	s.mu.Lock()
	s.tokens[tokenID] = token{project: project, expires: now.Add(s.opts.TokenLife)}
	s.mu.Unlock()

	var catalog []map[string]any
	for _, svc := range []struct{ typ, name, path string }{
		{"compute", "nova", "compute/v2.1"}, {"network", "neutron", "network"}, {"image", "glance", "image"},
		{"identity", "keystone", ""},
	} {
		var eps []map[string]string
		for _, region := range s.opts.Regions {
			u := base + "/" + region + "/" + svc.path
			if svc.typ == "identity" {
				u = base + "/identity"
			}
			for _, iface := range []string{"public", "internal"} {
				eps = append(eps, map[string]string{"id": newID(), "interface": iface, "region": region, "region_id": region, "url": u})
			}
		}
		catalog = append(catalog, map[string]any{"type": svc.typ, "name": svc.name, "id": newID(), "endpoints": eps})
	}
	dom := map[string]string{"id": "default", "name": "Default"}
	w.Header().Set("X-Subject-Token", tokenID)
	writeJSON(w, http.StatusCreated, map[string]any{"token": map[string]any{
		"methods":    []string{method},
		"issued_at":  now.Format("2006-01-02T15:04:05.000000Z"),
		"expires_at": now.Add(s.opts.TokenLife).Format("2006-01-02T15:04:05.000000Z"),
		"user":       map[string]any{"id": projectID("user:" + user), "name": user, "domain": dom, "password_expires_at": nil},
		"project":    map[string]any{"id": projectID(project), "name": project, "domain": dom},
		"roles":      []map[string]string{{"id": projectID("role:member"), "name": "member"}},
		"catalog":    catalog,
	}})
}

// projectID is a stable id for a name.
func projectID(name string) string {
	h := fnv.New64a()
	h.Write([]byte(name))
	return fmt.Sprintf("%016x0000000000000000", h.Sum64())
}
