package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Set at build time with
// -ldflags "-X github.com/cloudtransit/transit/cmd/transit/cli.version=v1.2.3 -X ...cli.commit=... -X ...cli.date=...".
var (
	version = "dev"
	commit  = ""
	date    = ""
)

// VersionInfo describes this build.
type VersionInfo struct {
	Version  string `json:"version"`
	Commit   string `json:"commit"`
	Date     string `json:"date"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// BuildVersion returns the version stamped at build time, falling back to
// what the Go toolchain recorded (go install module@version, VCS stamping).
func BuildVersion() VersionInfo {
	v := VersionInfo{
		Version:  version,
		Commit:   commit,
		Date:     date,
		Go:       runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH,
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && v.Commit == "":
				v.Commit = s.Value
			case s.Key == "vcs.time" && v.Date == "":
				v.Date = s.Value
			}
		}
	}
	if v.Commit == "" {
		v.Commit = "unknown"
	}
	if v.Date == "" {
		v.Date = "unknown"
	}
	return v
}

type versionFlags struct {
	json bool
}

// NewVersionCommand builds `transit version`.
func NewVersionCommand(deps Deps) *cobra.Command {
	f := &versionFlags{}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, build date and Go version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			v := BuildVersion()
			if f.json {
				return writeJSON(deps.Out, versionJSON{header: newHeader(typeVersion), VersionInfo: v})
			}
			_, err := fmt.Fprintf(deps.Out, "transit %s\n  commit: %s\n  built:  %s\n  go:     %s %s\n",
				v.Version, v.Commit, v.Date, v.Go, v.Platform)
			return err
		},
	}
	cmd.Flags().BoolVar(&f.json, "json", false, "print as JSON")
	return cmd
}
