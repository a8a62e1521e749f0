// Sends COUNT messages to TOPIC through the gRPC endpoint with the official 5.x Node client,
// each with a tag and a key; prints one JSON line per receipt, then {"done": n}.
const { Producer } = require('rocketmq-client-nodejs');

async function main() {
  const [endpoints, topic, count] = process.argv.slice(2);
  const producer = new Producer({ endpoints, requestTimeout: 10000 });
  await producer.startup();
  for (let i = 0; i < Number(count); i++) {
    const receipt = await producer.send({
      topic,
      tag: i % 2 === 0 ? 'even' : 'odd',
      keys: [`node-key-${i}`],
      properties: new Map([['seq', String(i)]]),
      body: Buffer.from(`node message ${i}`),
    });
    console.log(JSON.stringify({ sent: i, messageId: receipt.messageId }));
  }
  await producer.shutdown();
  console.log(JSON.stringify({ done: Number(count) }));
}

main().catch((err) => {
  console.log(JSON.stringify({ error: String(err && err.stack || err) }));
  process.exit(1);
});
