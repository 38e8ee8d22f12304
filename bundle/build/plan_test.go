package build

import (
	"archive/tar"
	"os"
	"path"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cloudtransit/transit/bundle"
)

// TestPlanOwnImages: the bundle builds each of transit's own controllers
// and the streams addon's images from this repository, statically in one
// go build, and makes each an image every node imports, tagged by
// content, the binary its entrypoint, run as user 65532.
func TestPlanOwnImages(t *testing.T) {
	t.Parallel()
	own := map[string]string{ // repository -> binary
		bundle.RelationsRepository:         "transit-relations",
		bundle.StreamsControllerRepository: "streams-controller",
		bundle.StreamsSidecarRepository:    "streams-sidecar",
		bundle.StreamsBrokerRepository:     "streams-broker",
		bundle.StreamsEchoRepository:       "streams-echo",
	}
	var controllers *goBuild
	for _, g := range goBuilds() {
		if g.out == "controllers" {
			controllers = &g
		}
	}
	if controllers == nil || controllers.module != "." || controllers.cgo {
		t.Fatalf("no static build of transit's controllers: %+v", controllers)
	}
	// A work directory with a stand-in for every built binary.
	work := t.TempDir()
	if err := os.MkdirAll(filepath.Join(work, "controllers"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, binary := range own {
		if !slices.Contains(controllers.pkgs, "github.com/cloudtransit/transit/cmd/"+binary) {
			t.Errorf("the controllers' build lacks cmd/%s: %v", binary, controllers.pkgs)
		}
		if err := os.WriteFile(filepath.Join(work, "controllers", binary), []byte(binary), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for _, spec := range images() {
		binary, ok := own[spec.ref]
		if !ok {
			continue
		}
		seen[spec.ref] = true
		if !spec.contentTag || spec.role != bundle.ForAll {
			t.Errorf("%s: content tag %v, for %q; want tagged by content, for every node", spec.ref, spec.contentTag, spec.role)
		}
		if !slices.Equal(spec.cfg.Entrypoint, []string{"/" + binary}) || spec.cfg.User != "65532:65532" {
			t.Errorf("%s: entrypoint %v as %q, want [/%s] as 65532:65532", spec.ref, spec.cfg.Entrypoint, spec.cfg.User, binary)
		}
		tr := newTree("/")
		if err := spec.make(tr, work); err != nil {
			t.Fatalf("%s: %v", spec.ref, err)
		}
		if e, ok := tr.entries["/"+binary]; !ok || e.kind != tar.TypeReg || e.mode&0o111 == 0 {
			t.Errorf("%s: no executable /%s in the image (%+v)", spec.ref, binary, e)
		}
		if path.Base(spec.file) != spec.file || filepath.Ext(spec.file) != ".tar" {
			t.Errorf("%s: file %q", spec.ref, spec.file)
		}
	}
	for repo := range own {
		if !seen[repo] {
			t.Errorf("the bundle has no image %s", repo)
		}
	}
}
