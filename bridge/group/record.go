package group

import (
	"errors"
	"fmt"
)

// RecordVersion is the version of Record this package writes. A reader accepts every version up
// to it; a later version means a newer bridge wrote the record and this one must not touch it.
const RecordVersion = 1

// Record is the state of a group that must survive a bridge restart, as plain data: the zkstate
// package serializes it (JSON) under the bridge's root and writes it with a version check on the
// group's epoch. It plays the part of Kafka's GroupMetadata record in __consumer_offsets
// (GroupMetadataManager.groupMetadataValue): generation, protocol, leader and every member with
// its subscription and assignment. Offsets are not part of it: they live in the Kafka 0.8 layout
// (/consumers/<group>/offsets) and are written beside it (Effects.Offsets).
type Record struct {
	Version      int            `json:"version"`
	Group        string         `json:"group"`
	Generation   Generation     `json:"generation"`
	ProtocolType string         `json:"protocol_type,omitempty"`
	ProtocolName string         `json:"protocol_name,omitempty"`
	Leader       MemberID       `json:"leader,omitempty"`
	Members      []RecordMember `json:"members"`
	// Rebalancing marks a record written when a join phase completed, before the leader's
	// assignment for the new generation was persisted: the members' assignments are the
	// previous generation's. A Restore of such a record starts a new rebalance. The generation
	// is persisted before any member learns it, so a restarted bridge never hands out the same
	// generation number twice.
	Rebalancing bool `json:"rebalancing,omitempty"`
	// Deleted marks the record of a deleted group (DeleteGroups): the shell removes the group's
	// record instead of writing it.
	Deleted bool `json:"deleted,omitempty"`
}

// RecordMember is one member of a Record.
type RecordMember struct {
	ID                 MemberID         `json:"id"`
	InstanceID         InstanceID       `json:"instance_id,omitempty"`
	Kind               Kind             `json:"kind"`
	ClientID           string           `json:"client_id"`
	ClientHost         string           `json:"client_host"`
	SessionTimeoutMs   int64            `json:"session_timeout_ms"`
	RebalanceTimeoutMs int64            `json:"rebalance_timeout_ms"`
	ProtocolType       string           `json:"protocol_type"`
	Protocols          []RecordProtocol `json:"protocols"`
	Assignment         []byte           `json:"assignment"`
}

// RecordProtocol is one protocol of a RecordMember (its metadata is the subscription).
type RecordProtocol struct {
	Name     string `json:"name"`
	Metadata []byte `json:"metadata"`
}

// Validate checks that the record is one this version can load: a known version and consistent
// members (unique ids and instance ids, a leader among them, a protocol every member lists).
func (r *Record) Validate() error {
	var errs []error
	if r.Version < 1 || r.Version > RecordVersion {
		errs = append(errs, fmt.Errorf("group: record version %d not supported (max %d)", r.Version, RecordVersion))
	}
	if r.Generation < 0 {
		errs = append(errs, fmt.Errorf("group: record generation %d is negative", r.Generation))
	}
	ids := make(map[MemberID]bool, len(r.Members))
	instances := make(map[InstanceID]bool)
	for _, mb := range r.Members {
		if mb.ID == "" {
			errs = append(errs, errors.New("group: record member with empty id"))
		}
		if ids[mb.ID] {
			errs = append(errs, fmt.Errorf("group: record member %q appears twice", mb.ID))
		}
		ids[mb.ID] = true
		if mb.InstanceID != "" {
			if instances[mb.InstanceID] {
				errs = append(errs, fmt.Errorf("group: record instance id %q appears twice", mb.InstanceID))
			}
			instances[mb.InstanceID] = true
		}
		switch mb.Kind {
		case KindKafka:
		case KindLegacy:
			// Legacy members register again after a restart: their registrations in
			// /consumers/<g>/ids are their record, and a Record naming one was not written by us.
			errs = append(errs, fmt.Errorf("group: record member %q is a legacy member, which the record does not hold", mb.ID))
		default:
			errs = append(errs, fmt.Errorf("group: record member %q has unknown kind %q", mb.ID, mb.Kind))
		}
		if r.ProtocolName != "" && !recordSupports(mb, r.ProtocolName) {
			errs = append(errs, fmt.Errorf("group: record member %q does not support protocol %q", mb.ID, r.ProtocolName))
		}
	}
	if len(r.Members) > 0 {
		if !ids[r.Leader] {
			errs = append(errs, fmt.Errorf("group: record leader %q is not a member", r.Leader))
		}
		if r.ProtocolName == "" {
			errs = append(errs, errors.New("group: record with members has no protocol"))
		}
	}
	return errors.Join(errs...)
}

func recordSupports(mb RecordMember, name string) bool {
	for _, p := range mb.Protocols {
		if p.Name == name {
			return true
		}
	}
	return false
}
