package dev.kaas.conformance;

import java.util.List;
import java.util.Map;

import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.source.SourceRecord;
import org.apache.kafka.connect.source.SourceTask;

/** One task of {@link SeqSource}. */
public final class SeqSourceTask extends SourceTask {
    private String topic;
    private String task;
    private int count;
    private long next;

    @Override
    public void start(Map<String, String> props) {
        topic = props.get("topic");
        task = props.get("task");
        count = Integer.parseInt(props.getOrDefault("count", "100"));
        Map<String, Object> off = context.offsetStorageReader().offset(Map.of("task", task));
        next = off == null ? 1 : ((Number) off.get("n")).longValue() + 1;
        System.out.println("T source " + task + " starts at " + next);
        System.out.flush();
    }

    @Override
    public List<SourceRecord> poll() throws InterruptedException {
        if (next > count) {
            Thread.sleep(200);
            return null;
        }
        Thread.sleep(20);
        long n = next++;
        return List.of(new SourceRecord(Map.of("task", task), Map.of("n", n), topic, null,
                Schema.STRING_SCHEMA, "t" + task, Schema.STRING_SCHEMA, String.format("t%s-%05d", task, n)));
    }

    @Override
    public void stop() {
    }

    @Override
    public String version() {
        return "1";
    }
}
