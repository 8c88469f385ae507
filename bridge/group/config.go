package group

import (
	"errors"
	"fmt"
	"time"
)

// Config holds the broker-side group settings. The names follow Kafka's broker configuration
// (group.initial.rebalance.delay.ms, group.min.session.timeout.ms, group.max.session.timeout.ms,
// group.max.size, offset.metadata.max.bytes); DefaultConfig returns Kafka's defaults.
type Config struct {
	// InitialRebalanceDelay delays the first join phase of an Empty group so that more members
	// can join it (group.initial.rebalance.delay.ms, default 3s; 0 disables the delay).
	InitialRebalanceDelay time.Duration
	// MinSessionTimeout and MaxSessionTimeout bound the session timeout a member may ask for
	// (group.min.session.timeout.ms 6s, group.max.session.timeout.ms 30min).
	MinSessionTimeout time.Duration
	MaxSessionTimeout time.Duration
	// MaxSize caps the number of members (group.max.size); 0 means unlimited (Kafka's default
	// is Int.MaxValue).
	MaxSize int
	// NewMemberJoinTimeout is how long a new member's parked JoinGroup may wait before the
	// member is dropped (Kafka's GroupCoordinator.NewMemberJoinTimeoutMs, 5 minutes).
	NewMemberJoinTimeout time.Duration
	// MaxOffsetMetadata caps the metadata string of a committed offset, in bytes
	// (offset.metadata.max.bytes, default 4096).
	MaxOffsetMetadata int
	// Legacy configures the legacy members' rebalances (legacy.go).
	Legacy LegacyConfig
}

// DefaultConfig returns Kafka's defaults.
func DefaultConfig() Config {
	return Config{
		InitialRebalanceDelay: 3 * time.Second,
		MinSessionTimeout:     6 * time.Second,
		MaxSessionTimeout:     30 * time.Minute,
		MaxSize:               0,
		NewMemberJoinTimeout:  5 * time.Minute,
		MaxOffsetMetadata:     4096,
	}
}

// Validate reports every setting out of range.
func (c Config) Validate() error {
	var errs []error
	if c.InitialRebalanceDelay < 0 {
		errs = append(errs, fmt.Errorf("group: InitialRebalanceDelay %v is negative", c.InitialRebalanceDelay))
	}
	if c.MinSessionTimeout <= 0 {
		errs = append(errs, fmt.Errorf("group: MinSessionTimeout %v must be positive", c.MinSessionTimeout))
	}
	if c.MaxSessionTimeout < c.MinSessionTimeout {
		errs = append(errs, fmt.Errorf("group: MaxSessionTimeout %v is below MinSessionTimeout %v", c.MaxSessionTimeout, c.MinSessionTimeout))
	}
	if c.MaxSize < 0 {
		errs = append(errs, fmt.Errorf("group: MaxSize %d is negative (0 means unlimited)", c.MaxSize))
	}
	if c.NewMemberJoinTimeout <= 0 {
		errs = append(errs, fmt.Errorf("group: NewMemberJoinTimeout %v must be positive", c.NewMemberJoinTimeout))
	}
	if c.MaxOffsetMetadata < 0 {
		errs = append(errs, fmt.Errorf("group: MaxOffsetMetadata %d is negative", c.MaxOffsetMetadata))
	}
	if err := c.Legacy.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// full reports whether a group of n members may not take one more.
func (c Config) full(n int) bool { return c.MaxSize > 0 && n >= c.MaxSize }
