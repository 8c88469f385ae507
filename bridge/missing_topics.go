package bridge

import (
	"context"

	"github.com/zkbridge/zkbridge/bridge/group"
)

// warnMissingTopics logs, once per group and topic (onceLog), a consumer's JoinGroup that
// subscribes to a topic /brokers/topics does not list: its assignor then hands
// out nothing of it and the consumer waits for data that never comes, which the client itself
// reports only at debug level. Nothing is refused: Kafka accepts such a subscription too (the
// topic may be created later). Topics come from the cluster's cache, so a join costs no read;
// without /brokers/topics (no cluster registered) there is nothing to compare with.
func (a *actor) warnMissingTopics(ctx context.Context, j group.JoinGroup) {
	src := a.c.topics
	if src == nil || j.ProtocolType != consumerProtocol || len(j.Protocols) == 0 {
		return
	}
	subscribed, err := subscribedTopics(j.Protocols[0].Metadata)
	if err != nil || len(subscribed) == 0 {
		return // an unreadable subscription is the mirror's to report
	}
	topics, err := src.Topics(ctx)
	if err != nil || !src.HasTopicsNode() {
		return
	}
	for _, t := range subscribed {
		if _, ok := topics[t]; ok {
			continue
		}
		a.c.logOnce.do("missing-topic:"+a.group+"\x00"+t, func() {
			a.log.Warn().Str("topic", t).Str("client_id", j.ClientID).Str("client_host", j.ClientHost).
				Msg("a member subscribes to a topic not in /brokers/topics: it gets no partition of it until the topic is created")
		})
	}
}
