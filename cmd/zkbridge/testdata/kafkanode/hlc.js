// A kafka-node 3.0.1 HighLevelConsumer (the ZooKeeper-era consumer of Node.js) in one group, for
// the Go tests: it registers in /consumers/<group>/ids and claims its partitions in /owners in
// kafka-node's own formats. Usage: node hlc.js <zk connect> <group> <topic,...>
// It prints "id <consumer id>" once, then runs until its stdin closes.
'use strict';

const kafka = require('kafka-node');

const [connect, groupId, topics] = process.argv.slice(2);
const client = new kafka.Client(connect, 'zkbridge-test');
const consumer = new kafka.HighLevelConsumer(
  client,
  topics.split(',').map((topic) => ({ topic })),
  { groupId, autoCommit: false }
);
process.stdout.write('id ' + consumer.id + '\n');
// Fetching is not what the tests look at (the stand-in brokers may refuse its old requests).
consumer.on('error', (err) => process.stderr.write('consumer: ' + err + '\n'));
client.on('error', (err) => process.stderr.write('client: ' + err + '\n'));

process.stdin.on('end', () => consumer.close(false, () => process.exit(0)));
process.stdin.resume();
