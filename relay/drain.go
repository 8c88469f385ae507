package relay

// A bridge that shuts down with other bridges live (several bridges as one
// service) first hands its upstream brokers to them: the others' Metadata,
// and its own, then name each broker at another bridge's proxy listener.
// Clients holding the older Metadata still fetch through this bridge's
// listeners, and would learn that the broker moved only when the listener
// closes. A closed connection is the slow way to tell them: kgo, for one,
// then refreshes its metadata no sooner than metadata.min.age after its
// last refresh (5 s by default), and fetches nothing meanwhile. A Kafka
// broker that gives up a partition's leadership answers its fetchers
// NOT_LEADER_OR_FOLLOWER instead, and clients refresh their metadata at
// once on that answer (kgo, librdkafka, the Java client).
//
// So, once Drain is called, a Fetch that arrives on the proxy listener of
// a broker another bridge now serves is answered here, not relayed: every
// partition it names NOT_LEADER_OR_FOLLOWER. A Fetch of an incremental
// fetch session (KIP-227) may name no partition at all; it is answered
// FETCH_SESSION_ID_NOT_FOUND, on which a client sends a full fetch at
// once, which names them all. A Fetch already relayed is let finish: it
// may carry records, and the client's next one is refused.
//
// Produce and every other request are still relayed: a producer loses
// nothing while the bridge is up, and a refused Produce would only make it
// retry against the same listener until its metadata refresh, which kgo
// paces by metadata.min.age whatever the error.
//
// Untold counts the client connections that fetched here and have not
// been refused since: the bridge keeps its listeners open until it is 0
// (every fetcher moved) or a bound passes.
//
// Producers counts the client connections that produced here and are
// still open. A producer learns that its broker moved from a metadata
// refresh, which kgo runs no sooner than metadata.min.age (5 s) after its
// previous one: a producer whose connection closes within 5 s of its last
// refresh produces nothing until they pass. So the bridge keeps relaying
// for them until that long has passed since the drain began (a producer
// that refreshed before it then refreshes at once when the connection
// closes) or they close (a producer that refreshed since was given the
// broker's new address, and kgo closes its connections to the old one).
//
// Then the bridge calls RefuseProducers: the next Produce (acks 1 or all)
// of each such connection is answered NOT_LEADER_OR_FOLLOWER for every
// partition, once, rather than the connection closed under it. The
// producer's last refresh is then more than metadata.min.age old, so it
// refreshes at once, and it asks a listener that still answers: after a
// close, kgo's Metadata request went first to the closed addresses of
// this bridge (EOF, retried after 250 ms, then 500 ms), 0.8 s without a
// record in the traced rolling restart. A refusal at the drain itself was
// measured and lost: it came within metadata.min.age of the producer's
// previous refresh, which kgo then waited for.

import (
	"encoding/binary"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/newproto"
)

// Drain makes the proxy refuse Fetch requests on the listeners of the
// brokers another bridge serves (Config.Peers), from now until the
// process ends. Without Peers it does nothing: a bridge alone has nowhere
// to send its clients.
func (p *Proxy) Drain() {
	if p.cfg.Peers != nil {
		p.draining.Store(true)
	}
}

// Untold returns how many open client connections fetched through the
// proxy listener of a broker another bridge serves now and have not had a
// Fetch refused since Drain (a broker served nowhere else keeps its
// fetchers: there is nowhere to send them).
func (p *Proxy) Untold() int {
	return p.countMoved(func(rc *relayConn) bool { return rc.proxied && rc.fetched.Load() && !rc.told.Load() })
}

// Producers returns how many open client connections produced through
// the proxy listener of a broker another bridge serves now.
func (p *Proxy) Producers() int {
	return p.countMoved(func(rc *relayConn) bool { return rc.produced.Load() })
}

// countMoved counts the open client connections to the proxy listener of
// a broker another bridge serves now for which counted holds (none
// without Peers).
func (p *Proxy) countMoved(counted func(*relayConn) bool) int {
	if p.cfg.Peers == nil {
		return 0
	}
	elsewhere := p.cfg.Peers.ServedElsewhere()
	p.connsMu.Lock()
	defer p.connsMu.Unlock()
	n := 0
	for rc := range p.conns {
		if _, moved := elsewhere[rc.broker]; moved && counted(rc) {
			n++
		}
	}
	return n
}

// RefuseProducers makes the proxy answer, once per connection, the next
// Produce (acks other than 0) on the listener of a broker another bridge
// serves NOT_LEADER_OR_FOLLOWER instead of relaying it: the producer
// refreshes its metadata, which names the broker elsewhere. Only after
// Drain: a bridge that is not draining keeps relaying for its producers.
func (p *Proxy) RefuseProducers() {
	if p.cfg.Peers != nil && p.draining.Load() {
		p.producersRefused.Store(true)
	}
}

// refusesProduce reports whether this connection's Produce is answered by
// refuseProduce rather than relayed (RefuseProducers).
func (rc *relayConn) refusesProduce() bool {
	if !rc.proxied || !rc.p.producersRefused.Load() || rc.producerTold.Load() {
		return false
	}
	_, elsewhere := rc.p.cfg.Peers.ServedElsewhere()[rc.broker]
	return elsewhere
}

// refuseProduce builds the response frame (size prefix included) to a
// Produce request frame (without its size prefix) from a broker that no
// longer leads anything the request names: nothing appended.
func refuseProduce(frame []byte) ([]byte, error) {
	req, err := newproto.ParseRequest(frame)
	if err != nil {
		return nil, err
	}
	pr, ok := req.Msg.(*kmsg.ProduceRequest)
	if !ok {
		return nil, fmt.Errorf("refusing a Produce: the frame is a %s", kmsg.NameForKey(req.Msg.Key()))
	}
	resp := kmsg.NewPtrProduceResponse()
	resp.SetVersion(pr.Version)
	for _, t := range pr.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, tp := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.ErrorCode = tp.Partition, kerr.NotLeaderForPartition.Code
			rp.BaseOffset, rp.LogStartOffset = -1, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return answerFrame(req.CorrelationID, resp), nil
}

// answerFrame encodes resp as the answer to the request with corr:
// size prefix, response header, body.
func answerFrame(corr int32, resp kmsg.Response) []byte {
	out := make([]byte, 8, 64)
	binary.BigEndian.PutUint32(out[4:], uint32(corr))
	if resp.IsFlexible() {
		out = append(out, 0) // response header v1: no tagged fields
	}
	out = resp.AppendTo(out)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out
}

// track adds (open) or removes a client connection from the ones Untold
// counts.
func (p *Proxy) track(rc *relayConn, open bool) {
	p.connsMu.Lock()
	defer p.connsMu.Unlock()
	if open {
		p.conns[rc] = struct{}{}
	} else {
		delete(p.conns, rc)
	}
}

// refusesFetch reports whether a Fetch on this connection is answered
// here (refuseFetch) rather than relayed, and notes that the connection
// fetches. refresh is non-zero when the Fetch is refused only to make the
// client refresh its metadata (Refresh): the Refresh count to note once a
// full fetch has been refused.
func (rc *relayConn) refusesFetch() (refuse bool, refresh int64) {
	if !rc.proxied {
		return false, 0
	}
	rc.fetched.Store(true)
	if rc.p.draining.Load() {
		if _, elsewhere := rc.p.cfg.Peers.ServedElsewhere()[rc.broker]; elsewhere {
			return true, 0
		}
	}
	if n := rc.p.refresh.Load(); rc.refreshed.Load() < n {
		return true, n
	}
	return false, 0
}

// Refresh makes every client fetching through the proxy listeners refresh
// its metadata once: the next Fetch of every open connection is refused
// as refuseFetch does (an incremental session fetch, answered
// FETCH_SESSION_ID_NOT_FOUND, is followed by a full one, which is refused
// too). The bridge calls it when another bridge leaves the service. kgo
// reads a connection only when a response is due, so a connection that a
// bridge closed when it shut down is found closed only when the client
// sends on it again: with a bridge restarted at the same addresses,
// that is the first request the client sends it after it is back (in a
// rolling restart: the commits of the groups moving back to it, each then
// retried after a backoff). kgo drops a broker's connections when a
// metadata refresh no longer lists it; refreshed while the bridge is out
// of every bridge's Metadata, the client dials it afresh when it is back.
//
// The Fetches already relayed and not answered yet are answered at once
// (heldfetch.go).
func (p *Proxy) Refresh() {
	if p.cfg.Peers != nil {
		p.answerHeldFetches(p.refresh.Add(1))
	}
}

// refuseFetch builds the response frame (size prefix included) to a Fetch
// request frame (without its size prefix) from a broker that is no
// longer the leader of anything the request names.
func refuseFetch(frame []byte) (raw []byte, full bool, err error) {
	req, err := newproto.ParseRequest(frame)
	if err != nil {
		return nil, false, err
	}
	fr, ok := req.Msg.(*kmsg.FetchRequest)
	if !ok {
		return nil, false, fmt.Errorf("refusing a Fetch: the frame is a %s", kmsg.NameForKey(req.Msg.Key()))
	}
	full = true
	resp := kmsg.NewPtrFetchResponse()
	resp.SetVersion(fr.Version)
	if fr.SessionID > 0 && fr.SessionEpoch > 0 {
		// Incremental: the partitions not named are in the session.
		resp.ErrorCode = kerr.FetchSessionIDNotFound.Code
		full = false
	} else {
		// Keep the client's session id, so that the client keeps
		// using sessions (an id of 0 turns them off for the broker in
		// kgo); it sends epoch 0 next, which starts a new one.
		resp.SessionID = max(fr.SessionID, 0)
		for _, t := range fr.Topics {
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, fp := range t.Partitions {
				rp := kmsg.NewFetchResponseTopicPartition()
				rp.Partition = fp.Partition
				rp.ErrorCode = kerr.NotLeaderForPartition.Code
				rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
	}
	return answerFrame(req.CorrelationID, resp), full, nil
}
