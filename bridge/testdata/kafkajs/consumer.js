// A default kafkajs 2.2.4 consumer (its eager RoundRobinAssigner) for bridge/kafkajs_test.go:
// node consumer.js <broker> <group> <topic>. It prints one JSON line per event on stdout:
// join (with its assignment), rebalancing, msg, crash; SIGTERM disconnects it (LeaveGroup).
const { Kafka, logLevel } = require('kafkajs');

const [broker, group, topic] = process.argv.slice(2);
const kafka = new Kafka({ clientId: 'kafkajs-default', brokers: [broker], logLevel: logLevel.NOTHING });
const consumer = kafka.consumer({ groupId: group, sessionTimeout: 6000, heartbeatInterval: 300, rebalanceTimeout: 5000 });
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');

consumer.on(consumer.events.GROUP_JOIN, (e) => out({ event: 'join', member: e.payload.memberId, protocol: e.payload.groupProtocol, assignment: e.payload.memberAssignment }));
consumer.on(consumer.events.REBALANCING, () => out({ event: 'rebalancing' }));
consumer.on(consumer.events.CRASH, (e) => out({ event: 'crash', error: String(e.payload.error) }));

process.on('SIGTERM', () => {
  consumer.disconnect().then(() => process.exit(0), () => process.exit(1));
});

(async () => {
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await consumer.run({
    autoCommitInterval: 200,
    eachMessage: async ({ partition, message }) => out({ event: 'msg', partition, offset: Number(message.offset), value: message.value.toString() }),
  });
})().catch((e) => {
  out({ event: 'fatal', error: String(e) });
  process.exit(1);
});
