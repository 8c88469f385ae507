package zkconsumer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
)

// The kafka.utils.ZkUtils helpers the consumer connector relies on, with their 0.8.2 semantics.

// readDataMaybeNull reads a znode; a missing one is (nil, false, nil) (ZkUtils:447-457).
func readDataMaybeNull(ctx context.Context, s *zkstate.Store, p string) ([]byte, bool, error) {
	data, _, err := s.Get(ctx, p)
	if errors.Is(err, zkstate.ErrNoNode) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return data, true, nil
}

// childrenParentMayNotExist lists a znode's children; a missing parent has none
// (ZkUtils:465-474).
func childrenParentMayNotExist(ctx context.Context, s *zkstate.Store, p string) ([]string, error) {
	kids, _, err := s.Children(ctx, p)
	if errors.Is(err, zkstate.ErrNoNode) {
		return nil, nil
	}
	return kids, err
}

// createEphemeralPathExpectConflict creates an ephemeral znode, and its missing parents as
// persistent ones (createEphemeralPath, ZkUtils:220-229). When the znode exists already it is
// read back and, if it holds exactly data, the create counts as done: "this can happen when
// there is connection loss" (ZkUtils:235-258). That check looks at the data only, never at the
// ephemeral owner, so a znode of another session holding the same data is taken as ours.
// Otherwise the error wraps zkstate.ErrNodeExists; a znode that vanished between the create and
// the read is a conflict too (ZkUtils:245, "let caller handles this").
func createEphemeralPathExpectConflict(ctx context.Context, s *zkstate.Store, p string, data []byte) error {
	err := s.Create(ctx, p, data, zkstate.CreateOptions{Ephemeral: true, Parents: true})
	if !errors.Is(err, zkstate.ErrNodeExists) {
		return err
	}
	stored, _, rerr := s.Get(ctx, p)
	switch {
	case errors.Is(rerr, zkstate.ErrNoNode):
		return err
	case rerr != nil:
		return rerr
	case bytes.Equal(stored, data):
		return nil
	}
	return fmt.Errorf("%w (holds %q, want %q)", err, stored, data)
}

// createEphemeralPathExpectConflictHandleZKBug is the registration's create (ZkUtils:272-299):
// on a conflict it reads the znode and, when checker accepts the data found, sleeps backoff
// and tries again, for ever; when the znode vanished it tries again at once. It stands for
// ZOOKEEPER-1740, an ephemeral outliving its session. stop ends the wait (0.8.2 would sleep
// on; its shutdown closes the ZooKeeper client under it, which makes the next call fail).
func createEphemeralPathExpectConflictHandleZKBug(ctx context.Context, s *zkstate.Store, p string, data []byte,
	checker func(stored []byte) bool, backoff time.Duration, stop <-chan struct{}, onWait func(stored []byte)) error {
	for {
		err := createEphemeralPathExpectConflict(ctx, s, p, data)
		if !errors.Is(err, zkstate.ErrNodeExists) {
			return err
		}
		stored, ok, rerr := readDataMaybeNull(ctx, s, p)
		if rerr != nil {
			return rerr
		}
		if !ok {
			continue
		}
		if !checker(stored) {
			return err
		}
		onWait(stored)
		if serr := sleep(ctx, stop, backoff); serr != nil {
			return fmt.Errorf("%w; gave up waiting: %w", err, serr)
		}
	}
}

// updatePersistentPath writes a persistent znode, creating it and its parents when missing
// (ZkUtils:324-340).
func updatePersistentPath(ctx context.Context, s *zkstate.Store, p string, data []byte) error {
	_, err := s.Set(ctx, p, data, -1)
	if !errors.Is(err, zkstate.ErrNoNode) {
		return err
	}
	err = s.Create(ctx, p, data, zkstate.CreateOptions{Parents: true})
	if errors.Is(err, zkstate.ErrNodeExists) {
		_, err = s.Set(ctx, p, data, -1)
	}
	return err
}

// deletePath deletes a znode whatever its version and owner; a missing one is fine
// (ZkUtils:408-418).
func deletePath(ctx context.Context, s *zkstate.Store, p string) error {
	err := s.Delete(ctx, p, -1)
	if errors.Is(err, zkstate.ErrNoNode) {
		return nil
	}
	return err
}

// errStopped: Close was called while we were waiting.
var errStopped = errors.New("consumer is shutting down")

// sleep waits d, or until ctx ends or stop is closed.
func sleep(ctx context.Context, stop <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-stop:
		return errStopped
	}
}
