// Receives and acks messages of TOPIC for GROUP through the gRPC endpoint with the official
// 5.x Node SimpleConsumer until COUNT were acked or DEADLINE seconds passed; prints one JSON
// line per message, then {"done": n}.
const { SimpleConsumer } = require('rocketmq-client-nodejs');

async function main() {
  const [endpoints, group, topic, count, deadline] = process.argv.slice(2);
  const consumer = new SimpleConsumer({
    endpoints,
    consumerGroup: group,
    subscriptions: new Map().set(topic, '*'),
    requestTimeout: 10000,
    awaitDuration: 3000,
  });
  await consumer.startup();
  const until = Date.now() + Number(deadline) * 1000;
  let acked = 0;
  while (acked < Number(count) && Date.now() < until) {
    const messages = await consumer.receive(16, 20000);
    for (const message of messages) {
      await consumer.ack(message);
      acked += 1;
      console.log(JSON.stringify({
        body: message.body.toString(),
        tag: message.tag,
        keys: message.keys,
        messageId: message.messageId,
        deliveryAttempt: message.deliveryAttempt,
      }));
    }
  }
  await consumer.shutdown();
  console.log(JSON.stringify({ done: acked }));
}

main().catch((err) => {
  console.log(JSON.stringify({ error: String(err && err.stack || err) }));
  process.exit(1);
});
