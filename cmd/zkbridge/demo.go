package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/zkbridge/zkbridge/zkstate"
)

// demoCommand loads a small 0.8-era layout (brokers, topics, one group with two ZooKeeper
// consumers, their owners and offsets) into ZooKeeper and describes it. Later issues extend the
// demo with the bridge and kafka and legacy members.
func demoCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "load a small Kafka 0.8 example layout into ZooKeeper and describe it",
		Description: "Writes 3 brokers, topics orders (6 partitions) and payments (4 partitions), and group\n" +
			"billing with two 0.8 consumers, their owners and offsets, under --zk (use a chroot such as\n" +
			"127.0.0.1:2181/zkbridge-demo to keep it apart). An existing demo layout is replaced.",
		Flags: append(zkFlags(), outputFlag()),
		Action: func(c *cli.Context) error {
			p, err := newPrinter(c.String("output"))
			if err != nil {
				return err
			}
			s, err := openStore(c, e)
			if err != nil {
				return err
			}
			defer s.Close()
			layout := zkstate.ExampleLayout()
			if err := zkstate.LoadLayout(c.Context, s, layout); err != nil {
				return fmt.Errorf("load example layout: %w", err)
			}
			e.log.Info().Str("zk", c.String("zk")).Msg("example 0.8 layout loaded")
			rows, err := listGroups(c, s)
			if err != nil {
				return err
			}
			if err := p.groups(e.stdout, rows); err != nil {
				return err
			}
			for _, r := range rows {
				snap, err := s.Snapshot(c.Context, r.Group)
				if err != nil {
					return err
				}
				fmt.Fprintln(e.stdout)
				if err := p.group(e.stdout, buildGroupView(snap)); err != nil {
					return err
				}
			}
			return nil
		},
	}
}
