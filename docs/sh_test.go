package docs_test

import (
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cloudtransit/transit/cmd/transit/cli"
)

// checkShell checks the transit commands of an sh fence against the real
// command tree: the subcommand exists, every flag is one of it (or
// global), the flags' values parse and the arguments are as many as the
// command takes. Nothing is run.
//
// A line is what is left after joining "\" continuations and dropping
// comments; lines starting with "$ " are commands and the others their
// output when any line does, else every line is a command. A line is
// split into commands at ;, &&, ||, | and &; a command's leading VAR=value
// assignments, sudo (and its options), env and time are skipped, and it
// is transit's when its program is transit (transit, ./transit,
// bin/transit, …). export lines, redirections, heredocs' bodies and
// process substitutions are left out.
func checkShell(f fence) []finding {
	var out []finding
	for _, c := range shellCommands(f) {
		if msg := checkTransit(c.args); msg != "" {
			msg = strings.Join(strings.Fields(msg), " ") // cobra's suggestions come on lines of their own
			out = append(out, finding{c.line, ruleSh, fmt.Sprintf("`transit %s`: %s", strings.Join(c.args, " "), msg)})
		}
	}
	return out
}

// shellCommand is one transit command line: its arguments after
// "transit", and the line it starts on.
type shellCommand struct {
	line int
	args []string
}

var heredoc = regexp.MustCompile(`<<-?\s*['"]?([A-Za-z_][A-Za-z0-9_]*)['"]?`)

func shellCommands(f fence) []shellCommand {
	prompted := false
	for _, l := range f.body {
		if strings.HasPrefix(strings.TrimSpace(l), "$ ") {
			prompted = true
		}
	}
	var out []shellCommand
	var endHeredoc string
	for i := 0; i < len(f.body); i++ {
		start := i
		line := f.body[i]
		if endHeredoc != "" {
			if strings.TrimSpace(line) == endHeredoc {
				endHeredoc = ""
			}
			continue
		}
		for strings.HasSuffix(line, `\`) && i+1 < len(f.body) {
			i++
			line = strings.TrimSuffix(line, `\`) + " " + f.body[i]
		}
		line = strings.TrimSpace(line)
		if prompted {
			if !strings.HasPrefix(line, "$ ") {
				continue
			}
		}
		line = strings.TrimPrefix(line, "$ ")
		if m := heredoc.FindStringSubmatch(line); m != nil {
			endHeredoc = m[1]
		}
		for _, words := range splitCommands(line) {
			if args, ok := transitArgs(words); ok {
				out = append(out, shellCommand{line: f.bodyLine(start), args: args})
			}
		}
	}
	return out
}

// splitCommands splits a line into commands of words: quotes are removed
// (their text kept as one word), $(…) and `…` kept inside their word, a
// comment, redirections and process substitutions dropped.
func splitCommands(line string) [][]string {
	var (
		cmds  [][]string
		words []string
		w     strings.Builder
		inW   bool
	)
	endWord := func() {
		if inW {
			words = append(words, w.String())
		}
		w.Reset()
		inW = false
	}
	endCmd := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	// balanced returns the index just past the ")" closing the "(" at i.
	balanced := func(i int) int {
		depth := 0
		for j := i; j < len(line); j++ {
			switch line[j] {
			case '(':
				depth++
			case ')':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(line)
	}
	redirect := false // the next word is a redirection's target
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case ch == '\\' && i+1 < len(line):
			i++
			w.WriteByte(line[i])
			inW = true
		case ch == '\'':
			end := strings.IndexByte(line[i+1:], '\'')
			if end < 0 {
				end = len(line) - i - 1
			}
			w.WriteString(line[i+1 : i+1+end])
			i += end + 1
			inW = true
		case ch == '"':
			j := i + 1
			for j < len(line) && line[j] != '"' {
				if line[j] == '\\' && j+1 < len(line) {
					j++
				}
				w.WriteByte(line[j])
				j++
			}
			i = j
			inW = true
		case ch == '$' && i+1 < len(line) && line[i+1] == '(':
			end := balanced(i + 1)
			w.WriteString(line[i:end])
			i = end - 1
			inW = true
		case ch == '`':
			end := strings.IndexByte(line[i+1:], '`')
			if end < 0 {
				end = len(line) - i - 1
			}
			w.WriteString(line[i : i+end+2])
			i += end + 1
			inW = true
		case ch == '#' && !inW:
			i = len(line)
		case ch == ' ' || ch == '\t':
			if redirect && inW {
				w.Reset()
				inW, redirect = false, false
				continue
			}
			endWord()
		case ch == ';' || ch == '|' || ch == '&':
			if ch == '&' && i+1 < len(line) && line[i+1] == '>' { // &> file
				endWord()
				i++
				redirect = true
				continue
			}
			if redirect {
				w.Reset()
				inW, redirect = false, false
			}
			endCmd()
			if i+1 < len(line) && (line[i+1] == '&' || line[i+1] == '|') {
				i++
			}
		case (ch == '<' || ch == '>') && i+1 < len(line) && line[i+1] == '(':
			// A process substitution: left out.
			endWord()
			i = balanced(i+1) - 1
		case ch == '<' && placeholder(line[i:]) > 0:
			// <FILE> and the like: a placeholder word, not a redirection.
			n := placeholder(line[i:])
			w.WriteString(line[i : i+n])
			i += n - 1
			inW = true
		case ch == '<' || ch == '>':
			// A redirection: a word of digits before it is its fd.
			if inW && strings.Trim(w.String(), "0123456789") == "" {
				w.Reset()
				inW = false
			}
			endWord()
			for i+1 < len(line) && strings.IndexByte("<>&-", line[i+1]) >= 0 {
				i++
			}
			redirect = true
		default:
			w.WriteByte(ch)
			inW = true
		}
	}
	if redirect {
		w.Reset()
		inW = false
	}
	endCmd()
	return cmds
}

var placeholderWord = regexp.MustCompile(`^<[A-Za-z][A-Za-z0-9_.…-]*>`)

func placeholder(s string) int { return len(placeholderWord.FindString(s)) }

var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// transitArgs returns a command's arguments after "transit", if it runs
// transit.
func transitArgs(words []string) ([]string, bool) {
	for len(words) > 0 {
		switch w := words[0]; {
		case assignment.MatchString(w), w == "time", w == "exec", w == "nohup":
			words = words[1:]
		case w == "sudo", w == "env":
			words = words[1:]
			for len(words) > 0 && strings.HasPrefix(words[0], "-") {
				words = words[1:]
			}
		case w == "export":
			return nil, false
		default:
			if path.Base(w) == "transit" {
				return words[1:], true
			}
			return nil, false
		}
	}
	return nil, false
}

// checkTransit says what the command tree refuses in args, or "".
func checkTransit(args []string) string {
	root := cli.NewRootCommand(cli.Deps{})
	// What Execute adds before it parses.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	args = cli.Args(args)
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err.Error()
	}
	cmd.InitDefaultHelpFlag()
	cmd.InitDefaultVersionFlag()
	if err := cmd.ParseFlags(rest); err != nil {
		return fmt.Sprintf("%s: %v", cmd.CommandPath(), err)
	}
	positional := cmd.Flags().Args()
	if !cmd.Runnable() && len(positional) > 0 {
		return fmt.Sprintf("%s has no subcommand %q (it has: %s)", cmd.CommandPath(), positional[0], subcommands(cmd))
	}
	if err := cmd.ValidateArgs(positional); err != nil {
		return fmt.Sprintf("%s: %v", cmd.CommandPath(), err)
	}
	return ""
}

func subcommands(cmd *cobra.Command) string {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	return strings.Join(names, ", ")
}

// checkWorkflow checks the transit commands of a CI workflow's run
// steps (GitHub Actions' "run:" keys, anywhere in the file) as sh lines.
func checkWorkflow(f fence, v any) []finding {
	var runs []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if s, ok := e.(string); ok && k == "run" {
					runs = append(runs, s)
					continue
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	var out []finding
	for _, run := range runs {
		lines := strings.Split(strings.TrimRight(run, "\n"), "\n")
		at := lineOf(f, lines[0])
		out = append(out, checkShell(fence{line: at - 1, info: "sh", body: lines, closed: true})...)
	}
	return out
}

// lineOf finds the file line of the fence's first line that holds s.
func lineOf(f fence, s string) int {
	for i, l := range f.body {
		if strings.Contains(l, strings.TrimSpace(s)) {
			return f.bodyLine(i)
		}
	}
	return f.line
}
