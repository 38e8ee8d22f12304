package kafka

import (
	"os"
	"testing"

	"github.com/cloudtransit/transit/cmdtest"
)

func TestMain(m *testing.M) { os.Exit(cmdtest.Main(m, "streams-broker")) }
