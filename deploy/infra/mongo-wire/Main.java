import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.backend.h2.H2Backend;
import de.bwaldvogel.mongo.bson.Document;
import io.netty.channel.Channel;

/**
 * The local MongoDB-wire server: mongo-java-server with its H2 backend, data in one file.
 *
 *   java -cp CLASSES:LIBS/* Main --host 127.0.0.1 --port 27017 --data DIR/mongo.mv
 *
 * Every command's writes are committed to the file before its answer (CommittingH2Backend), so a
 * write that was acknowledged survives the process being killed, as a MongoDB journal's would. H2
 * writes without fsync, so a crash of the machine itself can still lose the last writes.
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
    H2Backend backend = data == null ? H2Backend.inMemory() : new CommittingH2Backend(data);
    MongoServer server = new MongoServer(backend);
    server.bind(host, port);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      server.shutdownNow();
      backend.close();
    }, "shutdown"));
    System.out.println("{\"level\":\"info\",\"service\":\"mongo-wire\",\"msg\":\"listening\",\"address\":\"" + host + ":" + port + "\"}");
  }

  /**
   * H2's MVStore on its own commits in the background about once a second: a process killed (not
   * stopped) lost the writes of its last second, acknowledged ones included (files accepted with a
   * 202, then 404; caught by replicas-failover's "mongo-wire killed" on a machine fast enough to
   * restart the server within the test's window). Committing after each command that wrote closes
   * that window.
   */
  static final class CommittingH2Backend extends H2Backend {
    CommittingH2Backend(String file) {
      super(file);
    }

    @Override
    public Document handleCommand(Channel channel, String databaseName, String command, Document query) {
      Document answer = super.handleCommand(channel, databaseName, command, query);
      // A read leaves nothing to commit: it need not take the store's lock.
      if (getMvStore().hasUnsavedChanges()) commit();
      return answer;
    }
  }
}
