// Runs the official RocketMQ 5 Node.js client (rocketmq-client-nodejs) against a server:
// one scenario per process, named by a JSON argument; prints one JSON line of results.
//
// Scenarios:
// - push_fail: a PushConsumer whose listener always fails; records each delivery attempt
//   for `wait_ms`, then how long its shutdown takes (capped at 30 s).
// - simple_namespaced: a SimpleConsumer with a namespace receives once.
// - producer_topics: a Producer constructed with `topics` (several) starts, and sends one
//   message to each; reports how long startup() took (capped at `cap_ms`).
// - tls_roundtrip: with sslEnabled, a Producer sends `body` and a SimpleConsumer receives
//   and acks it (grpc-js verifies the server with its default roots, which the test points
//   at its CA with GRPC_DEFAULT_SSL_ROOTS_FILE_PATH).
'use strict';
const { PushConsumer, Producer, SimpleConsumer, ConsumeResult } = require('rocketmq-client-nodejs');

const silent = { info() {}, warn() {}, error() {}, debug() {}, trace() {} };
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function pushFail(spec) {
  const seen = [];
  const began = Date.now();
  const consumer = new PushConsumer({
    endpoints: spec.endpoint,
    namespace: '',
    consumerGroup: spec.group,
    logger: silent,
    subscriptions: new Map([[spec.topic, '*']]),
    messageListener: {
      async consume(message) {
        seen.push({ attempt: message.deliveryAttempt, at_ms: Date.now() - began });
        return ConsumeResult.FAILURE;
      },
    },
  });
  await consumer.startup();
  const producer = new Producer({ endpoints: spec.endpoint, namespace: '', logger: silent });
  await producer.startup();
  await producer.send({ topic: spec.topic, tag: 'fail', body: Buffer.from('fail me') });
  await producer.shutdown();
  await sleep(spec.wait_ms);
  const stopping = Date.now();
  await Promise.race([consumer.shutdown(), sleep(30000)]);
  return { seen, shutdown_ms: Date.now() - stopping };
}

async function simpleNamespaced(spec) {
  const consumer = new SimpleConsumer({
    endpoints: spec.endpoint,
    namespace: spec.namespace,
    consumerGroup: spec.group,
    logger: silent,
    subscriptions: new Map([[spec.topic, '*']]),
    awaitDuration: 5000,
  });
  try {
    await consumer.startup();
    const messages = await consumer.receive(4, 20000);
    return { received: messages.map((m) => m.body.toString()) };
  } catch (error) {
    return { error: String((error && error.message) || error) };
  }
}

async function tlsRoundtrip(spec) {
  const common = { endpoints: spec.endpoint, namespace: '', logger: silent, sslEnabled: true };
  const producer = new Producer(common);
  await producer.startup();
  const receipt = await producer.send({ topic: spec.topic, body: Buffer.from(spec.body) });
  await producer.shutdown();
  const consumer = new SimpleConsumer({
    ...common,
    consumerGroup: spec.group,
    subscriptions: new Map([[spec.topic, '*']]),
    awaitDuration: 5000,
  });
  await consumer.startup();
  const received = [];
  const giveUp = Date.now() + 30000;
  while (received.length === 0 && Date.now() < giveUp) {
    for (const message of await consumer.receive(4, 20000)) {
      await consumer.ack(message);
      received.push(message.body.toString());
    }
  }
  await consumer.shutdown();
  return { sent: receipt.messageId, received };
}

async function producerTopics(spec) {
  const producer = new Producer({
    endpoints: spec.endpoint,
    namespace: '',
    logger: silent,
    topics: spec.topics,
  });
  const began = Date.now();
  const started = await Promise.race([
    producer.startup().then(() => true),
    sleep(spec.cap_ms).then(() => false),
  ]);
  const startupMs = Date.now() - began;
  if (!started) {
    return { started, startup_ms: startupMs };
  }
  const sent = [];
  for (const topic of spec.topics) {
    sent.push((await producer.send({ topic, body: Buffer.from(topic) })).messageId);
  }
  await producer.shutdown();
  return { started, startup_ms: startupMs, sent: sent.length };
}

const scenarios = {
  producer_topics: producerTopics,
  push_fail: pushFail,
  simple_namespaced: simpleNamespaced,
  tls_roundtrip: tlsRoundtrip,
};

async function main() {
  const spec = JSON.parse(process.argv[2]);
  const result = await scenarios[spec.scenario](spec);
  console.log(JSON.stringify(result));
  process.exit(0);
}

main().catch((error) => {
  console.log(JSON.stringify({ failed: String((error && error.stack) || error) }));
  process.exit(1);
});
