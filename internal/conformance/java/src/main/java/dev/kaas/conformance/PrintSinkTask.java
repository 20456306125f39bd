package dev.kaas.conformance;

import java.util.Collection;
import java.util.Map;

import org.apache.kafka.connect.sink.SinkRecord;
import org.apache.kafka.connect.sink.SinkTask;

/** One task of {@link PrintSink}. */
public final class PrintSinkTask extends SinkTask {
    @Override
    public void start(Map<String, String> props) {
        System.out.println("T sink starts");
        System.out.flush();
    }

    @Override
    public void put(Collection<SinkRecord> records) {
        StringBuilder b = new StringBuilder();
        for (SinkRecord r : records) {
            b.append("R ").append(r.value()).append('\n');
        }
        System.out.print(b);
        System.out.flush();
    }

    @Override
    public void stop() {
    }

    @Override
    public String version() {
        return "1";
    }
}
