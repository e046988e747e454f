// Package poll is the tests' one way to wait for a condition: it calls the
// condition until it holds or a deadline passes, and then fails the test
// naming what was awaited and, where the condition reports one, its last
// detail. Tests wait for state this way, never with a bare sleep.
//
// The interval starts at 1 ms and doubles up to 50 ms, so a condition that
// holds soon is seen soon and one that takes seconds is not polled in a
// busy loop. Modelled on nats-server's checkFor.
package poll
