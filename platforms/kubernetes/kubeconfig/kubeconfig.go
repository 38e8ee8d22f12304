// Package kubeconfig makes a kubeconfig for the operator's machine from
// the admin kubeconfig kubeadm writes (admin.conf), and merges it into the
// operator's own kubeconfig file without touching any other entry.
//
// Export and Merge are pure; WriteMerged does the read-modify-write of a
// file. A kubeconfig holds credentials, so no error of this package shows
// a file's content, not even the part a YAML parser would quote.
package kubeconfig

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/clientcmd/api"
)

// ErrInvalid is a kubeconfig that does not parse or lacks what is needed.
var ErrInvalid = errors.New("not a usable kubeconfig")

// UserName is the name of the cluster's admin user in an exported
// kubeconfig: "<cluster>-admin".
func UserName(cluster string) string { return cluster + "-admin" }

// Export turns admin, a kubeconfig such as kubeadm's admin.conf (one
// cluster with its CA data, one user with a client certificate and key),
// into a kubeconfig whose only cluster and context are named name, whose
// only user is UserName(name), whose current context is name, and whose
// server is server. tlsServerName, when not empty, is the name the API
// server's certificate is checked against (server then names an address
// the certificate need not list). Only the CA data and the client
// certificate and key are taken from admin; its names, server and any
// other setting are not.
func Export(admin []byte, name, server, tlsServerName string) ([]byte, error) {
	if name == "" {
		return nil, errors.New("export kubeconfig: empty cluster name")
	}
	if u, err := url.Parse(server); err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("export kubeconfig: server %q is not an https://host:port URL", server)
	}
	src, err := load("admin kubeconfig", admin)
	if err != nil {
		return nil, err
	}
	cl, user, err := adminEntries(src)
	if err != nil {
		return nil, err
	}
	out := api.NewConfig()
	out.Clusters[name] = &api.Cluster{
		Server:                   server,
		TLSServerName:            tlsServerName,
		CertificateAuthorityData: bytes.Clone(cl.CertificateAuthorityData),
	}
	out.AuthInfos[UserName(name)] = &api.AuthInfo{
		ClientCertificateData: bytes.Clone(user.ClientCertificateData),
		ClientKeyData:         bytes.Clone(user.ClientKeyData),
	}
	out.Contexts[name] = &api.Context{Cluster: name, AuthInfo: UserName(name)}
	out.CurrentContext = name
	data, err := clientcmd.Write(*out)
	if err != nil {
		return nil, fmt.Errorf("export kubeconfig: %w", err)
	}
	return data, nil
}

// adminEntries returns admin's only cluster and only user, or every reason
// they will not do.
func adminEntries(c *api.Config) (*api.Cluster, *api.AuthInfo, error) {
	var problems []string
	var cl *api.Cluster
	var user *api.AuthInfo
	switch len(c.Clusters) {
	case 1:
		for n, v := range c.Clusters {
			cl = v
			if len(v.CertificateAuthorityData) == 0 {
				problems = append(problems, fmt.Sprintf("cluster %q has no certificate-authority-data", n))
			}
		}
	default:
		problems = append(problems, fmt.Sprintf("%d clusters, want exactly 1", len(c.Clusters)))
	}
	switch len(c.AuthInfos) {
	case 1:
		for n, v := range c.AuthInfos {
			user = v
			if len(v.ClientCertificateData) == 0 {
				problems = append(problems, fmt.Sprintf("user %q has no client-certificate-data", n))
			}
			if len(v.ClientKeyData) == 0 {
				problems = append(problems, fmt.Sprintf("user %q has no client-key-data", n))
			}
		}
	default:
		problems = append(problems, fmt.Sprintf("%d users, want exactly 1", len(c.AuthInfos)))
	}
	if len(problems) > 0 {
		return nil, nil, fmt.Errorf("admin kubeconfig: %w: %s (kubeadm's admin.conf has one cluster with its CA and one user with a client certificate and key)",
			ErrInvalid, strings.Join(problems, "; "))
	}
	return cl, user, nil
}

// Merge adds the cluster, user and context of exported (a kubeconfig
// Export made) to existing, replacing entries of the same names, and makes
// its context the current one, as kind and `gcloud container clusters
// get-credentials` do. Every other entry, the preferences and the
// extensions stay as they were. An empty existing is an empty kubeconfig;
// one that does not parse is an error, never replaced.
func Merge(existing, exported []byte) ([]byte, error) {
	ex, err := load("exported kubeconfig", exported)
	if err != nil {
		return nil, err
	}
	ctxName := ex.CurrentContext
	kctx := ex.Contexts[ctxName]
	if len(ex.Contexts) != 1 || kctx == nil || ex.Clusters[kctx.Cluster] == nil || ex.AuthInfos[kctx.AuthInfo] == nil {
		return nil, fmt.Errorf("exported kubeconfig: %w: want one context, the current one, with its cluster and user", ErrInvalid)
	}
	dst := api.NewConfig()
	if len(bytes.TrimSpace(existing)) > 0 {
		if dst, err = load("existing kubeconfig", existing); err != nil {
			return nil, err
		}
	}
	dst.Clusters[kctx.Cluster] = ex.Clusters[kctx.Cluster]
	dst.AuthInfos[kctx.AuthInfo] = ex.AuthInfos[kctx.AuthInfo]
	dst.Contexts[ctxName] = kctx
	dst.CurrentContext = ctxName
	data, err := clientcmd.Write(*dst)
	if err != nil {
		return nil, fmt.Errorf("merge kubeconfig: %w", err)
	}
	return data, nil
}

// load parses a kubeconfig. role names the file in errors ("admin
// kubeconfig").
func load(role string, data []byte) (*api.Config, error) {
	c, err := clientcmd.Load(data)
	if err != nil {
		return nil, &parseError{role: role, err: err}
	}
	// Load leaves the maps nil for a file without the lists.
	if c.Clusters == nil {
		c.Clusters = map[string]*api.Cluster{}
	}
	if c.AuthInfos == nil {
		c.AuthInfos = map[string]*api.AuthInfo{}
	}
	if c.Contexts == nil {
		c.Contexts = map[string]*api.Context{}
	}
	return c, nil
}

// parseError is a kubeconfig that does not parse. Its message gives the
// line the parser names, never the parser's own words: YAML errors quote
// the file (`invalid map key: map[…]{"…"}`), and the file holds
// credentials. Unwrap still gives the parser's error to code.
type parseError struct {
	role string
	err  error
}

var lineRE = regexp.MustCompile(`\bline (\d+)\b`)

func (e *parseError) Error() string {
	at := ""
	if m := lineRE.FindStringSubmatch(e.err.Error()); m != nil {
		at = " at line " + m[1]
	}
	return fmt.Sprintf("%s does not parse as a kubeconfig%s (the parser's message is not shown: the file holds credentials)", e.role, at)
}

func (e *parseError) Unwrap() []error { return []error{ErrInvalid, e.err} }
