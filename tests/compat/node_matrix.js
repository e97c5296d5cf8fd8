// The feature matrix of the official RocketMQ 5 Node.js client (rocketmq-client-nodejs)
// against a server: one scenario per process, named by a JSON argument; prints one JSON line
// of results, which test_official_node_matrix.py checks with popmq's own SDK and broker.
// Each scenario does several checks, so that the matrix costs few client start-ups.
//
// Scenarios:
// - produce: a Producer sends normal messages (tag, keys, properties), FIFO messages
//   (message groups), a FIFO message to a normal topic, delayed messages (one recalled,
//   twice) and transactional messages (to a normal topic, and to a transaction topic,
//   committed);
//   reports receipts and each error the client raised.
// - simple: SimpleConsumers receive, change the invisible duration (then ack with the old
//   handle and the new one), leave a message unacked to see it again, and filter by TAG and
//   SQL92 expressions.
// - push: PushConsumers, one per entry of `consumers`, run at once until each saw `want`
//   messages (a listener with `fail` fails every message); reports what each listener
//   saw, in order. They are not shut down; the process lingers `linger_ms`, then exits.
// - credentials: a Producer and a SimpleConsumer with sessionCredentials send, receive and
//   ack; a Producer with a wrong secret starts and sends.
'use strict';
const {
  FilterExpression,
  Producer,
  PushConsumer,
  SimpleConsumer,
  ConsumeResult,
} = require('rocketmq-client-nodejs');
const { FilterType } = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');

const silent = { info() {}, warn() {}, error() {}, debug() {}, trace() {} };
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function client(spec, more) {
  const options = { endpoints: spec.endpoint, namespace: '', logger: silent, ...more };
  if (spec.access_key) {
    options.sessionCredentials = { accessKey: spec.access_key, accessSecret: spec.secret_key };
  }
  return options;
}

// What a failed call raised: the client's exception class, its response code and its text,
// from the innermost cause (startup() wraps what the server said twice).
function failure(error) {
  let root = error;
  while (root && root.cause) root = root.cause;
  return {
    name: (root && root.name) || typeof root,
    code: root && root.code !== undefined ? root.code : null,
    text: String((root && root.message) || root),
    outer: String((error && error.message) || error),
  };
}

async function caught(call) {
  try {
    await call();
    return null;
  } catch (error) {
    return failure(error);
  }
}

function receipt(sent) {
  return { message_id: sent.messageId, offset: sent.offset, recall_handle: sent.recallHandle || null };
}

function view(message) {
  return {
    message_id: message.messageId,
    body: message.body.toString(),
    tag: message.tag || null,
    keys: message.keys,
    properties: Object.fromEntries(message.properties),
    message_group: message.messageGroup || null,
    delivery_attempt: message.deliveryAttempt,
    corrupted: message.corrupted === true, // set only when the digest does not match
  };
}

async function produce(spec) {
  // A checker is what lets the client begin a transaction; never asked here (all are ended).
  const producer = new Producer(client(spec, { checker: { async check() { return null; } } }));
  await producer.startup();
  const result = { normal: [], fifo: [] };
  result.normal.push(receipt(await producer.send({ topic: spec.normal, body: Buffer.from('plain') })));
  result.normal.push(receipt(await producer.send({
    topic: spec.normal,
    body: Buffer.from('tagged'),
    tag: 'TagA',
    keys: [ 'order-1', 'user-9' ],
    properties: new Map([[ 'a', '1' ], [ 'region', 'eu' ]]),
  })));
  for (let i = 0; i < 4; i++) {
    for (const group of [ 'g1', 'g2', 'g3' ]) {
      const sent = await producer.send({ topic: spec.fifo, body: Buffer.from(`${group}:${i}`), messageGroup: group });
      result.fifo.push(receipt(sent));
    }
  }
  result.fifo_to_normal = await caught(() => producer.send({
    topic: spec.normal, body: Buffer.from('x'), messageGroup: 'g',
  }));
  result.delay_sent_ms = Date.now();
  result.delay = receipt(await producer.send({ topic: spec.delay, body: Buffer.from('soon'), delay: 2000 }));
  const never = await producer.send({ topic: spec.delay, body: Buffer.from('never'), delay: 600000 });
  result.recall = {
    sent: never.messageId,
    first: (await producer.recallMessage(spec.delay, never.recallHandle)).messageId,
    second: await caught(() => producer.recallMessage(spec.delay, never.recallHandle)),
  };
  // The route of a normal topic does not accept TRANSACTION: the client refuses it itself.
  result.transaction_to_normal = await caught(() => producer.send(
    { topic: spec.normal, body: Buffer.from('tx') }, producer.beginTransaction()));
  // To a transaction topic: a half message, committed (no check comes: it is ended at once).
  const tx = producer.beginTransaction();
  result.transaction = await caught(async () => {
    const sent = await producer.send({ topic: spec.transaction, body: Buffer.from('tx') }, tx);
    result.transaction_receipt = { ...receipt(sent), transaction_id: sent.transactionId };
    await tx.commit();
  });
  await producer.shutdown();
  return result;
}

function simpleConsumer(spec, group, topic, filter) {
  return new SimpleConsumer(client(spec, {
    consumerGroup: group,
    subscriptions: new Map([[ topic, filter ]]),
    awaitDuration: 5000,
  }));
}

// Receive (and ack) until `want` messages came or 30 s passed.
async function drain(consumer, want) {
  const got = [];
  const giveUp = Date.now() + 30000;
  while (got.length < want && Date.now() < giveUp) {
    for (const message of await consumer.receive(16, 30000)) {
      await consumer.ack(message);
      got.push(view(message));
    }
  }
  return got;
}

async function simple(spec) {
  const result = { changed: [] };
  const billing = simpleConsumer(spec, 'billing', spec.orders, '*');
  await billing.startup();
  const giveUp = Date.now() + 30000;
  while (result.changed.length < spec.orders_count && Date.now() < giveUp) {
    for (const message of await billing.receive(16, 30000)) {
      const old = Object.assign(Object.create(Object.getPrototypeOf(message)), message);
      await billing.changeInvisibleDuration(message, 20000);
      result.changed.push({
        ...view(message),
        new_handle: message.receiptHandle !== old.receiptHandle,
        old_ack: await caught(() => billing.ack(old)),
        new_ack: await caught(() => billing.ack(message)),
      });
    }
  }
  await billing.shutdown();

  const retrier = simpleConsumer(spec, 'retrier', spec.retries, '*');
  await retrier.startup();
  const [ first ] = await retrier.receive(1, 2000); // left unacked: visible again after 2 s
  const firstAt = Date.now();
  let second;
  while (!second && Date.now() < firstAt + 30000) {
    [ second ] = await retrier.receive(1, 30000);
  }
  await retrier.ack(second);
  result.redelivery = { first: view(first), second: view(second), after_ms: Date.now() - firstAt };
  await retrier.shutdown();

  const tags = simpleConsumer(spec, 'tag-readers', spec.filtered, 'TagA||TagC');
  const sql = simpleConsumer(spec, 'sql-readers', spec.filtered,
    new FilterExpression("region = 'eu'", FilterType.SQL));
  await Promise.all([ tags.startup(), sql.startup() ]);
  [ result.tag, result.sql ] = await Promise.all([ drain(tags, 3), drain(sql, 2) ]);
  await Promise.all([ tags.shutdown(), sql.shutdown() ]);
  return result;
}

async function runPush(spec, entry) {
  const seen = [];
  let done;
  const finished = new Promise((resolve) => { done = resolve; });
  const consumer = new PushConsumer(client(spec, {
    consumerGroup: entry.group,
    subscriptions: new Map([[ entry.topic, '*' ]]),
    messageListener: {
      async consume(message) {
        seen.push(view(message));
        if (seen.length >= entry.want) done(true);
        return entry.fail ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
      },
    },
  }));
  await consumer.startup();
  const complete = await Promise.race([ finished, sleep(entry.deadline_ms).then(() => false) ]);
  // No shutdown(): it waits for the in-flight long poll (up to the 20 s popmq announces),
  // which push_fail in node_runner.js measures; the process exits instead.
  const fifo = consumer.getPushConsumerSettings().isFifo(); // from popmq's settings reply
  return { group: entry.group, complete, fifo, seen };
}

async function push(spec) {
  const consumers = await Promise.all(spec.consumers.map((entry) => runPush(spec, entry)));
  await sleep(spec.linger_ms || 0); // for what follows the last listener call (a forward)
  return { consumers };
}

async function credentials(spec) {
  const producer = new Producer(client(spec));
  await producer.startup();
  const sent = receipt(await producer.send({ topic: spec.topic, body: Buffer.from('signed') }));
  await producer.shutdown();
  const consumer = simpleConsumer(spec, spec.group, spec.topic, '*');
  await consumer.startup();
  const received = await drain(consumer, spec.want);
  await consumer.shutdown();
  const wrong = new Producer(client({ ...spec, secret_key: 'not-the-secret' }, { topics: [ spec.topic ] }));
  const refused = await caught(async () => {
    await wrong.startup();
    await wrong.send({ topic: spec.topic, body: Buffer.from('refused') });
  });
  await Promise.race([ wrong.shutdown().catch(() => null), sleep(5000) ]);
  return { sent, received, refused };
}

const scenarios = { credentials, produce, push, simple };

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
