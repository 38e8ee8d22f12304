package shellquote

import (
	"os/exec"
	"testing"
)

func TestQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", `''`},
		{"abc", `abc`},
		{"/var/lib/transit/x-1.2_3", `/var/lib/transit/x-1.2_3`},
		{"key=value:1,2+3@h%", `key=value:1,2+3@h%`},
		{"a b", `'a b'`},
		{"it's", `'it'\''s'`},
		{"'", `''\'''`},
		{"''", `''\'''\'''`},
		{`$HOME "x" \n`, `'$HOME "x" \n'`},
		{"`id`; rm -rf /", "'`id`; rm -rf /'"},
		{"line1\nline2", "'line1\nline2'"},
		{"*?[a]~", `'*?[a]~'`},
		{"~root", `'~root'`},
		{"a&b|c>d<e(f)g{h}i!j#k", `'a&b|c>d<e(f)g{h}i!j#k'`},
		{"é", `'é'`},
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		if got := Quote(tt.in); got != tt.want {
			t.Errorf("Quote(%q) = %s, want %s", tt.in, got, tt.want)
		}
		// And sh agrees: the quoted word is the original string.
		out, err := exec.CommandContext(t.Context(), sh, "-c", "printf %s "+Quote(tt.in)).Output()
		if err != nil {
			t.Fatalf("sh: %v", err)
		}
		if string(out) != tt.in {
			t.Errorf("sh read Quote(%q) as %q", tt.in, out)
		}
	}
}

func FuzzQuote(f *testing.F) {
	for _, s := range []string{"", "a b", "it's", "$(id)", "\x00", "-n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q := Quote(s)
		if q == "" {
			t.Fatalf("Quote(%q) is empty", s)
		}
		// Outside single quotes only safe bytes and escaped quotes.
		in := false
		for i := 0; i < len(q); i++ {
			switch c := q[i]; {
			case c == '\'':
				in = !in
			case in:
			case c == '\\' && i+1 < len(q) && q[i+1] == '\'':
				i++
			default:
				if !isSafe(c) {
					t.Fatalf("Quote(%q) = %q leaves %q unquoted", s, q, c)
				}
			}
		}
		if in {
			t.Fatalf("Quote(%q) = %q leaves a quote open", s, q)
		}
	})
}

func isSafe(c byte) bool {
	for i := 0; i < len(safe); i++ {
		if safe[i] == c {
			return true
		}
	}
	return false
}
