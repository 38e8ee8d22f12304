package drivertest

import (
	"fmt"

	"github.com/cloudtransit/transit/provider"
)

// LimitEdge is the most node addresses a group fits by l's GroupLimit,
// and that many distinct test addresses and one more: a driver's test
// makes a group of the first and is refused the second by its cloud.
func LimitEdge(l provider.GroupLimiter) (n int, fits, past []string) {
	for l.GroupLimit(n+1, false).Need <= l.GroupLimit(n+1, false).Max {
		n++
	}
	for i := range n + 1 {
		past = append(past, fmt.Sprintf("10.%d.%d.%d", i/65536%256, i/256%256, i%256))
	}
	return n, past[:n], past
}
