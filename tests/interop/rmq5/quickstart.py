"""docs/proxy.md's example, as a program: the official client sends one message to the proxy.

    python quickstart.py 127.0.0.1:8081 TopicTest

Prints {"sent": <message id>} and then {"done": true}, as the other programs here do.
"""

import json
import sys

# -- the example of docs/proxy.md, line for line -------------------------------------------------
from rocketmq import ClientConfiguration, Credentials, Message, Producer

endpoint, topic = sys.argv[1], sys.argv[2]  # the doc writes "127.0.0.1:8081", "TopicTest"
config = ClientConfiguration(endpoint, Credentials())
producer = Producer(config, (topic,))
producer.startup()
message = Message()
message.topic = topic
message.body = b"hello through the proxy"
message.tag = "TagA"
message.keys = "order-1"
receipt = producer.send(message)
print(json.dumps({"sent": receipt.message_id}))
producer.shutdown()
# -- end of the example ----------------------------------------------------------------------------
print(json.dumps({"done": True}))
