package bridge

// Kafka's ACLs, read from ZooKeeper where a ZooKeeper-mode Kafka cluster keeps them
// (kafka.zk.ZkAclStore), and followed through its change notifications:
//
//	/kafka-acl/<ResourceType>/<name>                    literal patterns ("*": every resource)
//	/kafka-acl-extended/prefixed/<ResourceType>/<name>  prefixed patterns
//	/kafka-acl-changes/acl_changes_<seq>                "<ResourceType>:<name>" of a literal change
//	/kafka-acl-extended-changes/acl_changes_<seq>       {"version":1,"resourceType":...,"name":...,"patternType":...}
//
// Any new change notification reloads the whole set: one ChildrenMany and one GetMany, a few
// round trips for thousands of ACLs, and nothing to get wrong about which pattern a change
// named. A resource znode that does not decode denies everything on its pattern until it is
// fixed: skipping it could drop a DENY.

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/authz"
	"github.com/zkbridge/zkbridge/zkstate"
)

const (
	aclLiteralRoot        = "/kafka-acl"
	aclPrefixedRoot       = "/kafka-acl-extended/prefixed"
	aclChangesPath        = "/kafka-acl-changes"
	aclExtendedChangePath = "/kafka-acl-extended-changes"
)

// AuthorizerZooKeeper is Config.Authorizer's one value: Kafka's ACLs from ZooKeeper.
const AuthorizerZooKeeper = "zookeeper"

// loadACLs reads every ACL.
func loadACLs(ctx context.Context, store *zkstate.Store, log zerolog.Logger) (*authz.Table, error) {
	acls := map[authz.Pattern][]authz.Entry{}
	for _, root := range []struct {
		path string
		typ  authz.PatternType
	}{{aclLiteralRoot, authz.Literal}, {aclPrefixedRoot, authz.Prefixed}} {
		types, _, err := store.Children(ctx, root.path)
		if errors.Is(err, zkstate.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading ACLs: %w", err)
		}
		var typePaths []string
		var rtypes []authz.ResourceType
		for _, t := range types {
			rt, err := authz.ParseResourceType(t)
			if err != nil {
				log.Warn().Str("path", path.Join(root.path, t)).Msg("unknown ACL resource type; ignored")
				continue
			}
			typePaths = append(typePaths, path.Join(root.path, t))
			rtypes = append(rtypes, rt)
		}
		children, err := store.ChildrenMany(ctx, typePaths)
		if err != nil {
			return nil, fmt.Errorf("reading ACLs: %w", err)
		}
		var resPaths []string
		var patterns []authz.Pattern
		for i, c := range children {
			if c.Err != nil {
				if errors.Is(c.Err, zkstate.ErrNoNode) {
					continue
				}
				return nil, fmt.Errorf("reading ACLs: %w", c.Err)
			}
			for _, name := range c.Children {
				resPaths = append(resPaths, path.Join(typePaths[i], name))
				patterns = append(patterns, authz.Pattern{Type: rtypes[i], Name: name, PatternType: root.typ})
			}
		}
		data, err := store.GetMany(ctx, resPaths)
		if err != nil {
			return nil, fmt.Errorf("reading ACLs: %w", err)
		}
		for i, d := range data {
			if d.Err != nil {
				if errors.Is(d.Err, zkstate.ErrNoNode) {
					continue // deleted between the two reads
				}
				return nil, fmt.Errorf("reading ACLs: %w", d.Err)
			}
			es, err := authz.DecodeEntries(d.Data)
			if err != nil {
				log.Error().Err(err).Str("path", resPaths[i]).Msg("ACL znode does not decode; denying everything on its pattern")
				es = []authz.Entry{{Principal: "User:*", Host: authz.Wildcard, Operation: authz.All}}
			}
			acls[patterns[i]] = es
		}
	}
	return authz.NewTable(acls), nil
}

// followACLs reloads a's ACLs whenever a change notification appears, until ctx ends. A
// failed reload keeps the previous ACLs and is retried.
func followACLs(ctx context.Context, store *zkstate.Store, a *authz.Authorizer, log zerolog.Logger) {
	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, p := range []string{aclChangesPath, aclExtendedChangePath} {
		evs, err := store.WatchChildren(ctx, p)
		if err != nil {
			if ctx.Err() == nil {
				log.Error().Err(err).Str("path", p).Msg("cannot watch ACL changes")
			}
			return
		}
		wg.Go(func() {
			for range evs {
				poke()
			}
		})
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		t, err := loadACLs(ctx, store, log)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn().Err(err).Msg("reloading ACLs failed; keeping the previous ones")
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			poke()
			continue
		}
		a.Set(t)
		log.Debug().Int("patterns", t.Len()).Msg("ACLs reloaded")
	}
}
