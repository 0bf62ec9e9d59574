/*
 * A bench workload as a Kafka Streams application: the Kafka Streams peer of `eos bench`.
 *
 *   java -cp 'app.jar:libs/*' eosbench.BenchApp WORKLOAD --bootstrap-servers B
 *       --application-id ID --source TOPIC --sink TOPIC --commit-interval-ms MS
 *       --threads N --state-dir DIR [--table TOPIC]
 *
 * Written with the Streams DSL the way Kafka's documentation shows a user to, so the peer is
 * measured as its users run it: exactly_once_v2, and the record caches off
 * (statestore.cache.max.bytes=0) so that every update of a table is emitted, one output
 * record per input word, as the oracle of every system expects. With the caches on, Kafka
 * Streams would fold the updates of a key between two commits into one.
 *
 *   wordcount, aggregate  split each line on spaces, regroup by word (a repartition topic),
 *                         count() in a RocksDB store with a change log; aggregate's lines
 *                         have one word each
 *   pageviews             regroup views by user; a processor with a store of the (user, page)
 *                         pairs seen marks each view a page's new visitor or not; regroup
 *                         by page; aggregate "views:visitors"
 *   passthrough           the source copied to the sink, keys and values as they are
 *   enrich                clicks keyed by their user (a repartition topic), left-joined
 *                         with the users table (a KTable of --table)
 *
 * Prints "ready" once the instance first reaches RUNNING (its one member holds every task);
 * ends on SIGTERM, closing Kafka Streams from a shutdown hook; exits 1 when Kafka Streams
 * fails, the exception on stderr.
 */
package eosbench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

public final class BenchApp {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String SEEN_STORE = "pages-seen";

    private BenchApp() {}

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = parse(argv);
        String workload = args.get("workload");
        String sink = args.get("sink");
        StreamsBuilder builder = new StreamsBuilder();
        switch (workload) {
            case "wordcount", "aggregate" -> wordcount(builder, args.get("source"), sink);
            case "pageviews" -> pageviews(builder, args.get("source"), sink);
            case "passthrough" -> builder.stream(args.get("source"),
                    Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
                .to(sink, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));
            case "enrich" -> enrich(builder, args.get("source"), required(args, "table"), sink);
            default -> throw new IllegalArgumentException("unknown workload " + workload);
        }
        KafkaStreams streams = new KafkaStreams(builder.build(), config(args));
        AtomicBoolean said = new AtomicBoolean();
        CountDownLatch failed = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING && !said.getAndSet(true)) {
                System.out.println("ready");
                System.out.flush();
            } else if (now == KafkaStreams.State.ERROR) {
                failed.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(exc -> {
            System.err.println("Kafka Streams failed: " + exc);
            exc.printStackTrace();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        // SIGTERM: the JVM runs its shutdown hooks; close() commits and ends the
        // transactions in flight, as a user's graceful stop does.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> streams.close(Duration.ofSeconds(30))));
        streams.start();
        failed.await();
        streams.close(Duration.ofSeconds(30));
        System.exit(1);
    }

    private static Properties config(Map<String, String> args) {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, required(args, "application-id"));
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, required(args, "bootstrap-servers"));
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, required(args, "commit-interval-ms"));
        // every update of a table emitted, none folded into the next (see the top)
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, "0");
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, required(args, "threads"));
        p.put(StreamsConfig.STATE_DIR_CONFIG, required(args, "state-dir"));
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        return p;
    }

    private static void wordcount(StreamsBuilder builder, String source, String sink) {
        builder.stream(source, Consumed.with(Serdes.String(), Serdes.String()))
            .flatMapValues(BenchApp::words)
            .groupBy((key, word) -> word, Grouped.with("words", Serdes.String(), Serdes.String()))
            .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts")
                .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
            .toStream()
            .mapValues(count -> Long.toString(count))
            .to(sink, Produced.with(Serdes.String(), Serdes.String()));
    }

    private static List<String> words(String line) {
        List<String> out = new ArrayList<>();
        for (String word : line.split(" ")) {
            if (!word.isEmpty()) {
                out.add(word);
            }
        }
        return out;
    }

    private static void pageviews(StreamsBuilder builder, String source, String sink) {
        builder.addStateStore(Stores.keyValueStoreBuilder(
            Stores.persistentKeyValueStore(SEEN_STORE), Serdes.String(), Serdes.Integer()));
        builder.stream(source, Consumed.with(Serdes.String(), Serdes.String()))
            .map((key, view) -> {
                JsonNode node = read(view);
                return org.apache.kafka.streams.KeyValue.pair(
                    node.get("user").asText(), node.get("page").asText());
            })
            .repartition(Repartitioned.with(Serdes.String(), Serdes.String()).withName("by-user"))
            .process(FirstVisit::new, SEEN_STORE)
            .groupByKey(Grouped.with("by-page", Serdes.String(), Serdes.Integer()))
            .aggregate(() -> "0:0", BenchApp::pageTotal,
                Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("page-totals")
                    .withKeySerde(Serdes.String()).withValueSerde(Serdes.String()))
            .toStream()
            .to(sink, Produced.with(Serdes.String(), Serdes.String()));
    }

    /** Per view (keyed by user, the page its value): the page, and 1 if the user had never
     * viewed it before, else 0. */
    private static final class FirstVisit implements Processor<String, String, String, Integer> {
        private ProcessorContext<String, Integer> context;
        private KeyValueStore<String, Integer> seen;

        @Override
        public void init(ProcessorContext<String, Integer> context) {
            this.context = context;
            this.seen = context.getStateStore(SEEN_STORE);
        }

        @Override
        public void process(Record<String, String> view) {
            String pair = view.key() + "\u0000" + view.value();
            int fresh = seen.get(pair) == null ? 1 : 0;
            if (fresh == 1) {
                seen.put(pair, 1);
            }
            context.forward(view.withKey(view.value()).withValue(fresh));
        }
    }

    private static String pageTotal(String page, Integer fresh, String total) {
        int colon = total.indexOf(':');
        long views = Long.parseLong(total, 0, colon, 10) + 1;
        long visitors = Long.parseLong(total, colon + 1, total.length(), 10) + fresh;
        return views + ":" + visitors;
    }

    private static void enrich(StreamsBuilder builder, String source, String table, String sink) {
        KTable<String, String> users = builder.table(table,
            Consumed.with(Serdes.String(), Serdes.String()),
            Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("users")
                .withKeySerde(Serdes.String()).withValueSerde(Serdes.String()));
        KStream<String, String> clicks = builder.stream(source,
            Consumed.with(Serdes.String(), Serdes.String()));
        clicks.selectKey((key, click) -> read(click).get("user").asText())
            .leftJoin(users, BenchApp::enriched)
            .to(sink, Produced.with(Serdes.String(), Serdes.String()));
    }

    private static String enriched(String click, String row) {
        String id = read(click).get("click").asText();
        if (row == null) {
            return id + "|-";
        }
        JsonNode r = read(row);
        return id + "|" + r.get("name").asText() + ":" + r.get("tier").asText();
    }

    private static JsonNode read(String json) {
        try {
            return JSON.readTree(json);
        } catch (java.io.IOException exc) {
            throw new IllegalArgumentException("not JSON: " + json, exc);
        }
    }

    private static Map<String, String> parse(String[] argv) {
        Map<String, String> args = new HashMap<>();
        if (argv.length == 0 || argv[0].startsWith("--")) {
            throw new IllegalArgumentException("usage: BenchApp WORKLOAD --option value ...");
        }
        args.put("workload", argv[0]);
        for (int i = 1; i + 1 < argv.length; i += 2) {
            if (!argv[i].startsWith("--")) {
                throw new IllegalArgumentException("expected an --option, got " + argv[i]);
            }
            args.put(argv[i].substring(2), argv[i + 1]);
        }
        for (String name : List.of("source", "sink")) {
            required(args, name);
        }
        return args;
    }

    private static String required(Map<String, String> args, String name) {
        String value = args.get(name);
        if (value == null) {
            throw new IllegalArgumentException("--" + name + " is required");
        }
        return value;
    }
}
