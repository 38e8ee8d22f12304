package ssh

import "strings"

// Quote returns s quoted for POSIX sh: inside single quotes, each single
// quote in s written as
//
//	'\''
//
// (close the quotes, an escaped quote, reopen).
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
