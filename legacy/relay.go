package legacy

// A version 0 consumer relayed to its group's coordinator (Forwarder): the server dials the
// coordinator's legacy listener, asks it at version 1 whether it coordinates the group (so a
// relayed connection is never relayed again: its Consult names the group, and bridges whose
// views of the live set differ for a moment refuse rather than bounce it), sends the consumer's
// RegisterRequest, and then copies bytes both ways until either side closes. The consumer
// talks to its coordinator through this bridge for as long as the connection lasts; the
// coordinator closes it when it hands the group over or the consumer dies, and the consumer
// then consults again (docs §8 "Consumer" 2).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// relay passes the connection on to bridge id at addr with m as its registration; it returns
// when the relayed connection ends. A failure before the relay starts refuses the consumer
// (COORDINATOR_NOT_AVAILABLE when the coordinator cannot be reached, NOT_COORDINATOR when it
// does not coordinate the group either) so that it consults again.
func (c *serverConn) relay(ctx context.Context, m *RegisterRequest, id int32, addr string, log zerolog.Logger) {
	log = log.With().Int32("coordinator", id).Str("coordinator_addr", addr).Logger()
	up, code, err := c.dialCoordinator(ctx, m, id, addr)
	if err != nil {
		log.Info().Err(err).Stringer("code", code).Msg("relaying the version 0 consumer to its coordinator failed; refusing it")
		_ = c.write(&RegisterResponse{ErrorCode: code})
		_ = c.nc.Close()
		return
	}
	log.Info().Msg("version 0 consumer registered through this bridge: relaying its connection to the group's coordinator")
	_ = c.nc.SetDeadline(time.Time{})
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			_ = c.nc.Close()
			_ = up.Close()
		})
	}
	stop := context.AfterFunc(ctx, closeBoth)
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(up, c.nc)
		closeBoth()
	}()
	_, _ = io.Copy(c.nc, up)
	closeBoth()
	<-done
	log.Info().Msg("relayed connection of the version 0 consumer ended")
}

// dialCoordinator connects to the coordinator, checks that it coordinates m's group and sends
// it m.
func (c *serverConn) dialCoordinator(ctx context.Context, m *RegisterRequest, id int32, addr string) (net.Conn, ErrorCode, error) {
	timeout := c.srv.cfg.WriteTimeout
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	up, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, CodeCoordinatorNotAvailable, fmt.Errorf("legacy: connecting to coordinator %d at %s: %w", id, addr, err)
	}
	_ = up.SetDeadline(time.Now().Add(timeout))
	resp, err := c.askCoordinator(up, m.GroupID)
	if err != nil {
		_ = up.Close()
		return nil, CodeCoordinatorNotAvailable, fmt.Errorf("legacy: consulting coordinator %d at %s: %w", id, addr, err)
	}
	if resp.ErrorCode != CodeNone || resp.CoordinatorID != id {
		_ = up.Close()
		return nil, CodeNotCoordinator, fmt.Errorf("legacy: bridge %d at %s names coordinator %d of group %q (%v)", id, addr, resp.CoordinatorID, m.GroupID, resp.ErrorCode)
	}
	if _, err := up.Write(AppendFrame(nil, m)); err != nil {
		_ = up.Close()
		return nil, CodeCoordinatorNotAvailable, fmt.Errorf("legacy: registering with coordinator %d at %s: %w", id, addr, err)
	}
	_ = up.SetDeadline(time.Time{})
	return up, CodeNone, nil
}

// askCoordinator sends a version 1 ConsultRequest for group on up and reads the answer.
func (c *serverConn) askCoordinator(up net.Conn, group string) (*ConsultResponse, error) {
	if _, err := up.Write(AppendFrame(nil, &ConsultRequest{GroupID: group})); err != nil {
		return nil, err
	}
	frame, err := ReadFrame(up, c.srv.cfg.MaxFrameBytes)
	if err != nil {
		return nil, err
	}
	msg, err := Decode(frame)
	if err != nil {
		return nil, err
	}
	resp, ok := msg.(*ConsultResponse)
	if !ok {
		return nil, errors.New("the answer to a ConsultRequest is not a ConsultResponse")
	}
	return resp, nil
}
