//go:build linux

package bridge

// The Kafka listener is opened above the descriptors the process will use, so that it is the
// first socket a killed bridge's kernel closes. Linux releases a dead process's descriptors
// last-opened-number first (exit_files queues each final close as task work, run last in, first
// out: measured, 8,000 sockets closed over 60-120 ms, the highest-numbered first), and the
// listener, opened at start, had one of the lowest numbers: it took connections until every
// client connection of the dead bridge had ended, over 0.4 s in a traced crash at 300 groups.
// The other bridges learn of the death from its listener (peers_down.go: a refusal while the
// connection held open to it is open) and from that connection's end, which came just before the
// listener's; its clients, refreshing their metadata as their connections ended, were answered
// with the dead bridge's addresses until kgo's next refresh (metadata.min.age, 5 s), and two of
// them in a row in a member's group lookups end its session. Opened above, the listener refuses
// at the start of the teardown, before most client connections end.
//
// A socket's number is the lowest free one when it is made, so the numbers below listenFloor are
// filled (duplicates of one descriptor, close-on-exec) while the listener is made, and freed at
// once. A process that comes to hold more descriptors than listenFloor has its later ones above
// the listener: those close before it, as every one did before.

import (
	"context"
	"net"
	"os"
	"syscall"
)

// listenFloor bounds the number the Kafka listener is opened at (under the open files limit): a
// bridge at 300 groups held about 3,000 descriptors; filling 16,384 takes a few milliseconds.
const listenFloor = 1 << 14

// listenLast opens a listener at addr with lc, numbered above the descriptors in use, up to
// listenFloor or the open files limit less a margin. If the numbers cannot be filled, the
// listener is opened where it falls.
func listenLast(ctx context.Context, lc *net.ListenConfig, addr string) (net.Listener, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return lc.Listen(ctx, "tcp", addr)
	}
	floor := min(uint64(listenFloor), lim.Cur-min(lim.Cur, 256))
	null, err := os.Open(os.DevNull)
	if err != nil {
		return lc.Listen(ctx, "tcp", addr)
	}
	defer null.Close()
	var filled []int
	defer func() {
		for _, fd := range filled {
			_ = syscall.Close(fd)
		}
	}()
	for {
		fd, _, errno := syscall.Syscall(syscall.SYS_FCNTL, null.Fd(), syscall.F_DUPFD_CLOEXEC, 0)
		if errno != 0 {
			break // the limit reached: as far as it went
		}
		filled = append(filled, int(fd))
		if uint64(fd) >= floor {
			break
		}
	}
	return lc.Listen(ctx, "tcp", addr)
}
