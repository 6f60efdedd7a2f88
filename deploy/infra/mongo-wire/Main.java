import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.backend.h2.H2Backend;

/**
 * The local MongoDB-wire server: mongo-java-server with its H2 backend, data in one file.
 *
 *   java -cp CLASSES:LIBS/* Main --host 127.0.0.1 --port 27017 --data DIR/mongo.mv
 *
 * H2's MVStore commits in the background about once a second rather than fsyncing every write, so
 * a machine crash can lose the last second; a stopped process (SIGTERM) commits and closes cleanly.
 * With --data omitted the data lives in memory only.
 */
public final class Main {
  public static void main(String[] args) {
    String host = "127.0.0.1";
    int port = 27017;
    String data = null;
    for (int i = 0; i + 1 < args.length; i += 2) {
      switch (args[i]) {
        case "--host" -> host = args[i + 1];
        case "--port" -> port = Integer.parseInt(args[i + 1]);
        case "--data" -> data = args[i + 1];
        default -> {
          System.err.println("unknown option " + args[i] + "; use --host, --port, --data");
          System.exit(2);
        }
      }
    }
    H2Backend backend = data == null ? H2Backend.inMemory() : new H2Backend(data);
    MongoServer server = new MongoServer(backend);
    server.bind(host, port);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      server.shutdownNow();
      backend.close();
    }, "shutdown"));
    System.out.println("{\"level\":\"info\",\"service\":\"mongo-wire\",\"msg\":\"listening\",\"address\":\"" + host + ":" + port + "\"}");
  }
}
