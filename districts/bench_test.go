package districts

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkLoadResources10000Nodes measures reading the state of a
// 10,000-node cluster, as every plan, apply and status does.
func BenchmarkLoadResources10000Nodes(b *testing.B) {
	r := Resources{Type: "resources", Version: ResourcesVersion, Cluster: "big"}
	for i := range 10_000 {
		r.Nodes = append(r.Nodes, Node{Type: "node", ID: fmt.Sprintf("big-worker-%d", i+1), Cluster: "big", District: "aws-europe",
			Role: RoleWorker, Flavor: "small", ProviderID: fmt.Sprintf("i-%08d", i), PublicIP: fmt.Sprintf("198.51.%d.%d", i>>8, i&255),
			Tags: map[string]string{"location": "Europe"}, Phase: PhaseJoined, CreatedAt: time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)})
	}
	data, err := json.Marshal(r)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "resources.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := LoadResources(path); err != nil {
			b.Fatal(err)
		}
	}
}
