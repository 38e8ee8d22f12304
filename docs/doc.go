// Package docs holds transit's documentation (README.md at the repository
// root and the pages of this directory). It has no code: its tests check
// that the documentation does not drift from the code, and run with every
// `go test ./...` (`make test`):
//
//	go test ./docs/                      # everything
//	go test -run TestDocs ./docs/        # README.md and docs/**/*.md
//	go test -run TestTroubleshooting ./docs/
//
// Each failure names file:line, the rule (below) and what to fix.
//
// # Code blocks
//
// Every example is a fenced code block (``` or ~~~) whose info string says
// what it shows; an indented code block is an error (rule indented-code),
// since nothing would check it. An untagged fence is rule untagged, an
// info string not listed here rule tag.
//
//   - json cluster.json, json districts.json, json credentials.json,
//     json prices.json, json resources.json: a whole file. It is read by
//     transit's own loaders (package districts: the strict decoder, unknown
//     keys are errors, and the file's own rules), alone: cluster.json as
//     districts.Load reads it without districts.json (its references are
//     not checked), districts.json by districts.LoadDistricts without
//     credentials.json, credentials.json by districts.LoadCredentials,
//     prices.json as districts.Load reads it without districts.json,
//     resources.json by districts.LoadResources. Then each cluster.json of a page must also
//     load, as `transit validate` loads it, with at least one of the page's
//     districts.json examples (and, if the page has any, with or without
//     one of its prices.json examples); a page without a districts.json
//     example has nothing to check its cluster.json with.
//   - json settings: addon settings, as cluster.json's "addons" holds them:
//     one entry ({"name": "streams", "settings": {…}}), a list of entries,
//     an "addons": [...] member, or a bare settings object (then some addon
//     must take it). They are validated inside the repository's
//     examples/kubernetes/cluster.json by districts.Load.
//   - json output: what transit prints: one JSON document, or one per
//     line. An object's format_version must be cli.FormatVersion and its
//     error_kind one of cli.ErrorKinds.
//   - json fragment: a part of a file: a JSON value, the members of an
//     object ("key": value, …) or the items of a list ({…}, {…}). It must
//     parse; nothing more is checked.
//   - yaml k8s: Kubernetes objects, "---" between documents. Each has
//     apiVersion and kind. An object of transit's own CRDs (the relations
//     and streams addons' controllers/*/config/crd) is validated as the API
//     server validates it on a create with strict field validation: no
//     unknown field, metadata, the OpenAPI v3 schema after defaulting, and
//     the CRD's CEL rules. Kubernetes' own kinds must decode strictly with
//     client-go's scheme (an unknown or duplicate field is an error). Any
//     other kind is an error.
//   - yaml workflow: a CI workflow (GitHub Actions): it must parse, and
//     every "run:" step is checked as an sh fence.
//   - yaml fragment: any other YAML (a part of an object, another
//     project's kind, a tool's file): it must parse.
//   - sh: shell commands. Each transit command is checked against the
//     real command tree (cli.NewRootCommand, nothing is run): the
//     subcommand exists, every flag is one of it or a global one, the
//     flags' values parse (--lock-timeout 10m, not soon) and the arguments
//     are as many as it takes. A line is what is left after joining "\"
//     continuations and dropping comments; when some lines start with
//     "$ ", only those are commands (the others are output). A line is
//     split into commands at ;, &&, ||, | and &; a command's leading
//     VAR=value assignments, sudo (and its options), env and time are
//     skipped, and it is transit's when its program is transit,
//     ./transit, bin/transit, …. export lines, redirections, heredocs'
//     bodies and process substitutions are left out; <FILE>-style
//     placeholders are arguments. Placeholders for flags' values must
//     parse as the flag does.
//   - go: Go code: it must parse, as a file (starting with package), as
//     declarations, or as the statements of a function body.
//   - text: anything else (transit's text output, a plan): not checked.
//
// # Links
//
// Every relative link of README.md and docs/**/*.md — [x](path),
// [x](path#anchor), [x](#anchor), reference definitions, and an HTML
// <a href> or <img src> — must name a file or directory that exists
// (relative to the page; a leading "/" is the repository root), and an
// anchor into a Markdown file must be one of its headings' (GitHub's rule:
// the heading's text without markup, lower case, every character but
// letters, digits, spaces, "-" and "_" removed, spaces turned into "-";
// the second heading of one text gets "-1", the third "-2") or an HTML
// <a name> or id. Links with a scheme (https:, mailto:) are not fetched.
// Rules link and anchor.
//
// # Error kinds
//
// Any table whose first column is "kind" (or "error_kind") and that has
// an "exit" column lists error kinds (rule error-kinds): each kind of
// cli.ErrorKinds must have a row, once, whose exit cell holds exactly its
// exit codes (every number in the cell), no row may name another kind,
// and no cell may be empty. docs/troubleshooting.md must have such a table
// with a column for what causes each kind and one for what to do.
package docs
