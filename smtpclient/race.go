//go:build race

package smtpclient

// Under the race detector sockets are read and written through net.Conn:
// internal/poll tells the detector that a read follows the peer's write,
// which raw system calls cannot (tests that read what a server goroutine
// recorded before it replied would report races that are not there).
const rawIO = false
