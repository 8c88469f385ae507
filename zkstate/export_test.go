package zkstate

import "testing"

// TestConnect gives the internal tests the package's ZooKeeper: they cannot
// import zktest, which imports zkstate. TestMain (store_test.go) sets it to
// zktest.Connect.
var TestConnect func(testing.TB) string
