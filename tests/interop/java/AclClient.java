import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.exception.RequestTimeoutException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.RPCHook;

/**
 * RocketMQ's Java client against a broker with ACL on, driven by tests/interop/test_java_acl.py.
 *
 * <pre>
 * java AclClient produce-consume NAMESRV TOPIC GROUP COUNT [ACCESS_KEY SECRET_KEY]
 * java AclClient refused NAMESRV TOPIC GROUP [ACCESS_KEY SECRET_KEY]
 * java AclClient sql92 NAMESRV TOPIC GROUP COUNT EXPECTED SQL
 * java AclClient request NAMESRV TOPIC GROUP TIMEOUT_MS BODY
 * java AclClient respond NAMESRV TOPIC GROUP COUNT
 * </pre>
 *
 * Prints one result per line for the test to parse:
 * SENT status msgId, RECEIVED queueId queueOffset body, SEND_REFUSED code remark,
 * PULL_REFUSED code remark, SEND_OK / PULL_OK (a request that should have been refused was
 * not), START_REFUSED code remark (a push consumer whose start the broker refused), and DONE
 * at the end. The sql92 mode sends COUNT messages with the property a = 0 .. COUNT-1 and has a
 * push consumer subscribed with MessageSelector.bySql(SQL) wait for EXPECTED of them. The request
 * mode sends BODY with DefaultMQProducer.request and prints REPLY body (or REQUEST_TIMEOUT); the
 * respond mode answers COUNT requests with MessageUtil.createReplyMessage ("re:" + body), printing
 * RESPONDING once its consumer runs and REPLIED status body after each reply. Without ACCESS_KEY the clients carry no RPC hook (unsigned).
 * TLS comes from RocketMQ's system properties (-Dtls.enable=true, -Dtls.client.certPath=...).
 */
public final class AclClient {
    private static final long RECEIVE_DEADLINE_MS = 90_000;
    /** A cold JVM's first send (route lookup, TLS set-up) on a busy machine takes seconds. */
    private static final int SEND_TIMEOUT_MS = 20_000;

    private AclClient() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: AclClient produce-consume|refused NAMESRV TOPIC GROUP ...");
            System.exit(2);
        }
        String mode = args[0];
        String namesrv = args[1];
        String topic = args[2];
        String group = args[3];
        if (mode.equals("produce-consume") && (args.length == 5 || args.length == 7)) {
            int count = Integer.parseInt(args[4]);
            produceConsume(namesrv, topic, group, count, args.length == 7 ? hook(args[5], args[6]) : null);
        } else if (mode.equals("sql92") && args.length == 7) {
            sql92(namesrv, topic, group, Integer.parseInt(args[4]), Integer.parseInt(args[5]), args[6]);
        } else if (mode.equals("request") && args.length == 6) {
            request(namesrv, topic, group, Long.parseLong(args[4]), args[5]);
        } else if (mode.equals("respond") && args.length == 5) {
            respond(namesrv, topic, group, Integer.parseInt(args[4]));
        } else if (mode.equals("refused") && (args.length == 4 || args.length == 6)) {
            refused(namesrv, topic, group, args.length == 6 ? hook(args[4], args[5]) : null);
        } else {
            System.err.println("AclClient: unknown mode or wrong argument count: " + String.join(" ", args));
            System.exit(2);
        }
        System.out.println("DONE");
        System.out.flush();
        // The clients' non-daemon threads can outlive shutdown(); the answer is printed.
        System.exit(0);
    }

    private static RPCHook hook(String accessKey, String secretKey) {
        return new AclClientRPCHook(new SessionCredentials(accessKey, secretKey));
    }

    private static void produceConsume(String namesrv, String topic, String group, int count, RPCHook hook)
            throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(group + "-producer", hook);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("acl-producer");
        producer.setSendMsgTimeout(SEND_TIMEOUT_MS);
        producer.start();
        try {
            for (int i = 0; i < count; i++) {
                Message message = new Message(topic, "TagA", ("java message " + i).getBytes(StandardCharsets.UTF_8));
                SendResult result = producer.send(message);
                System.out.println("SENT " + result.getSendStatus() + " " + result.getMsgId());
            }
        } finally {
            producer.shutdown();
        }

        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(group, hook);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("acl-consumer");
        consumer.setAutoCommit(false);
        consumer.start();
        try {
            Collection<MessageQueue> queues = consumer.fetchMessageQueues(topic);
            consumer.assign(queues);
            for (MessageQueue queue : queues) {
                consumer.seek(queue, 0);
            }
            int received = 0;
            long deadline = System.currentTimeMillis() + RECEIVE_DEADLINE_MS;
            while (received < count && System.currentTimeMillis() < deadline) {
                List<MessageExt> batch = consumer.poll(1000);
                for (MessageExt message : batch) {
                    System.out.println("RECEIVED " + message.getQueueId() + " " + message.getQueueOffset() + " "
                            + new String(message.getBody(), StandardCharsets.UTF_8));
                    received++;
                }
            }
        } finally {
            consumer.shutdown();
        }
    }

    private static void sql92(String namesrv, String topic, String group, int count, int expected, String sql)
            throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(group + "-producer");
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("sql92-producer");
        producer.setSendMsgTimeout(SEND_TIMEOUT_MS);
        producer.start();
        try {
            for (int i = 0; i < count; i++) {
                Message message = new Message(topic, "TagA", ("java message " + i).getBytes(StandardCharsets.UTF_8));
                message.putUserProperty("a", String.valueOf(i));
                SendResult result = producer.send(message);
                System.out.println("SENT " + result.getSendStatus() + " " + result.getMsgId());
            }
        } finally {
            producer.shutdown();
        }

        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("sql92-consumer");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        AtomicInteger received = new AtomicInteger();
        consumer.subscribe(topic, MessageSelector.bySql(sql));
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                synchronized (System.out) {
                    System.out.println("RECEIVED " + message.getQueueId() + " " + message.getQueueOffset() + " "
                            + new String(message.getBody(), StandardCharsets.UTF_8));
                }
                received.incrementAndGet();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        try {
            consumer.start();
        } catch (MQClientException e) {
            System.out.println("START_REFUSED " + responseCode(e) + " " + oneLine(e));
            consumer.shutdown();
            return;
        }
        try {
            long deadline = System.currentTimeMillis() + RECEIVE_DEADLINE_MS;
            while (received.get() < expected && System.currentTimeMillis() < deadline) {
                Thread.sleep(50);
            }
        } finally {
            consumer.shutdown();
        }
    }

    private static void request(String namesrv, String topic, String group, long timeoutMs, String body)
            throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(group);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("request-producer");
        producer.setSendMsgTimeout(SEND_TIMEOUT_MS);
        producer.start();
        try {
            Message reply = producer.request(
                    new Message(topic, "TagA", body.getBytes(StandardCharsets.UTF_8)), timeoutMs);
            System.out.println("REPLY " + new String(reply.getBody(), StandardCharsets.UTF_8));
        } catch (RequestTimeoutException e) {
            System.out.println("REQUEST_TIMEOUT " + oneLine(e));
        } finally {
            producer.shutdown();
        }
    }

    private static void respond(String namesrv, String topic, String group, int count) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(group + "-replier");
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("respond-producer");
        producer.setSendMsgTimeout(SEND_TIMEOUT_MS);
        producer.start();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("respond-consumer");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        AtomicInteger replied = new AtomicInteger();
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                String body = new String(message.getBody(), StandardCharsets.UTF_8);
                try {
                    Message reply = MessageUtil.createReplyMessage(
                            message, ("re:" + body).getBytes(StandardCharsets.UTF_8));
                    SendResult result = producer.send(reply);
                    synchronized (System.out) {
                        System.out.println("REPLIED " + result.getSendStatus() + " " + body);
                    }
                } catch (Exception e) {
                    synchronized (System.out) {
                        System.out.println("REPLY_FAILED " + responseCode(e) + " " + oneLine(e));
                    }
                }
                replied.incrementAndGet();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        System.out.println("RESPONDING");
        System.out.flush();
        try {
            long deadline = System.currentTimeMillis() + RECEIVE_DEADLINE_MS;
            while (replied.get() < count && System.currentTimeMillis() < deadline) {
                Thread.sleep(50);
            }
        } finally {
            consumer.shutdown();
            producer.shutdown();
        }
    }

    private static void refused(String namesrv, String topic, String group, RPCHook hook) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(group + "-producer", hook);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("acl-refused-producer");
        producer.setRetryTimesWhenSendFailed(0);
        producer.setSendMsgTimeout(SEND_TIMEOUT_MS);
        producer.start();
        try {
            producer.send(new Message(topic, "TagA", "must be refused".getBytes(StandardCharsets.UTF_8)));
            System.out.println("SEND_OK");
        } catch (Exception e) {
            System.out.println("SEND_REFUSED " + responseCode(e) + " " + oneLine(e));
        } finally {
            producer.shutdown();
        }

        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer(group, hook);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("acl-refused-consumer");
        consumer.start();
        try {
            List<MessageQueue> queues = new ArrayList<>(consumer.fetchSubscribeMessageQueues(topic));
            consumer.pull(queues.get(0), "*", 0, 32);
            System.out.println("PULL_OK");
        } catch (Exception e) {
            System.out.println("PULL_REFUSED " + responseCode(e) + " " + oneLine(e));
        } finally {
            consumer.shutdown();
        }
    }

    /** The broker's response code carried by the exception or its causes, or -1. */
    private static int responseCode(Throwable error) {
        for (Throwable e = error; e != null; e = e.getCause()) {
            if (e instanceof MQBrokerException) {
                return ((MQBrokerException) e).getResponseCode();
            }
            if (e instanceof MQClientException && ((MQClientException) e).getResponseCode() > 0) {
                return ((MQClientException) e).getResponseCode();
            }
        }
        return -1;
    }

    private static String oneLine(Throwable error) {
        StringBuilder text = new StringBuilder();
        for (Throwable e = error; e != null; e = e.getCause()) {
            text.append(e.getClass().getSimpleName()).append(": ").append(e.getMessage()).append(" | ");
        }
        return text.toString().replaceAll("\\s+", " ");
    }
}
