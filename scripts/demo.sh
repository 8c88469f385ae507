#!/usr/bin/env bash
# The README's run command: start a local ZooKeeper (Debian's package, installed when missing) on
# 127.0.0.1:${ZK_PORT:-2181}, build zkbridge, load a small Kafka 0.8 layout and describe it, then run
# the bridge in front of an in-process stand-in Kafka cluster (kfake) and a Kafka consumer group
# through it, and show the group as ZooKeeper holds it.
# ZooKeeper keeps running afterwards so you can try the other commands; stop it with
#   scripts/zookeeper.sh stop
set -euo pipefail
cd "$(dirname "$0")/.."
port=${ZK_PORT:-2181}

connect=$(scripts/zookeeper.sh start --port "$port")
echo "ZooKeeper answering on $connect" >&2
mkdir -p bin
go build -o bin/zkbridge ./cmd/zkbridge
bin/zkbridge demo --with-kafka --zk "$connect/zkbridge-demo"
echo
echo "Try: bin/zkbridge groups describe billing --zk $connect/zkbridge-demo --output json" >&2
echo "     bin/zkbridge offsets export billing --zk $connect/zkbridge-demo" >&2
