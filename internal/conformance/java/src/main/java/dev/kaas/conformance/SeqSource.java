package dev.kaas.conformance;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.Task;
import org.apache.kafka.connect.source.SourceConnector;

/**
 * A source connector for the Connect test: each of its tasks writes the
 * values "t&lt;task&gt;-&lt;n&gt;" for n = 1..count to the topic, one every
 * 20 ms, under the source partition {task} and the source offset {n}, so a
 * task that moves to another worker resumes after the last offset Connect
 * committed for it.
 *
 * <p>Config: topic, count (per task), tasks.max.
 */
public final class SeqSource extends SourceConnector {
    static final ConfigDef CONFIG = new ConfigDef()
            .define("topic", ConfigDef.Type.STRING, ConfigDef.Importance.HIGH, "the topic written")
            .define("count", ConfigDef.Type.INT, 100, ConfigDef.Importance.HIGH, "values per task");

    private Map<String, String> props;

    @Override
    public void start(Map<String, String> props) {
        this.props = props;
    }

    @Override
    public Class<? extends Task> taskClass() {
        return SeqSourceTask.class;
    }

    @Override
    public List<Map<String, String>> taskConfigs(int maxTasks) {
        List<Map<String, String>> out = new ArrayList<>();
        for (int i = 0; i < maxTasks; i++) {
            Map<String, String> c = new java.util.HashMap<>(props);
            c.put("task", Integer.toString(i));
            out.add(c);
        }
        return out;
    }

    @Override
    public void stop() {
    }

    @Override
    public ConfigDef config() {
        return CONFIG;
    }

    @Override
    public String version() {
        return "1";
    }
}
