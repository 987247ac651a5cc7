// A Neo4j Community server in this JVM for tests and local runs (the neo4j-harness
// in-process builder): Bolt only, on 127.0.0.1 and the port given, data under the folder
// given. Prints "NEO4J_BOLT=bolt://127.0.0.1:PORT" once it answers, and closes the
// database on SIGTERM (a shutdown hook), so its files are consistent when it exits.
//
//   java -cp 'lib/*:classes' Neo4jRunner DIR PORT
import java.nio.file.Path;
import java.util.concurrent.CountDownLatch;

import org.neo4j.configuration.GraphDatabaseSettings;
import org.neo4j.configuration.connectors.BoltConnector;
import org.neo4j.configuration.connectors.HttpConnector;
import org.neo4j.configuration.connectors.HttpsConnector;
import org.neo4j.configuration.helpers.SocketAddress;
import org.neo4j.harness.Neo4j;
import org.neo4j.harness.Neo4jBuilders;

public final class Neo4jRunner {
    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: Neo4jRunner DIR PORT");
            System.exit(2);
        }
        Path dir = Path.of(args[0]);
        int port = Integer.parseInt(args[1]);
        SocketAddress bolt = new SocketAddress("127.0.0.1", port);
        Neo4j neo4j = Neo4jBuilders.newInProcessBuilder(dir)
            .withDisabledServer()
            .withConfig(BoltConnector.enabled, true)
            .withConfig(BoltConnector.listen_address, bolt)
            .withConfig(BoltConnector.advertised_address, bolt)
            .withConfig(HttpConnector.enabled, false)
            .withConfig(HttpsConnector.enabled, false)
            .withConfig(GraphDatabaseSettings.pagecache_memory, 64L * 1024 * 1024)
            .build();
        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            neo4j.close();
            closed.countDown();
        }));
        System.out.println("NEO4J_BOLT=bolt://127.0.0.1:" + port);
        System.out.flush();
        closed.await();
    }
}
