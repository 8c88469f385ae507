//go:build !linux

package bridge

import (
	"context"
	"net"
)

// listenLast opens a listener at addr with lc (listen_last_linux.go: where the listener's number
// decides when a killed process's kernel closes it).
func listenLast(ctx context.Context, lc *net.ListenConfig, addr string) (net.Listener, error) {
	return lc.Listen(ctx, "tcp", addr)
}
