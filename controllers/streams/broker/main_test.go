package broker_test

import (
	"os"
	"testing"

	"github.com/cloudtransit/transit/controllers/streams/brokertest"
)

func TestMain(m *testing.M) { os.Exit(brokertest.Main(m)) }
