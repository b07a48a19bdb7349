import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.ExponentialBackoffRetry;

/**
 * The Java side of the Curator interop tests: a real Curator client locking a path.
 *
 *   java CuratorLock <connectString> <mutex|read|write> <path>              (commands on stdin)
 *   java CuratorLock <connectString> <mutex|read|write> <path> <holdMs> <rounds>
 *
 * On stdin, "acquire" takes the lock (printing "HOLDING <epoch ms>"), "release" lets it go
 * ("RELEASED <epoch ms>"), end of input exits. With holdMs and rounds it takes and holds the lock
 * `rounds` times, printing "HOLD <start ms> <end ms>" for each, the end read just before release.
 */
public final class CuratorLock {
  public static void main(String[] args) throws Exception {
    CuratorFramework client = CuratorFrameworkFactory.builder()
        .connectString(args[0])
        .sessionTimeoutMs(10_000)
        .connectionTimeoutMs(10_000)
        .retryPolicy(new ExponentialBackoffRetry(100, 5))
        .build();
    client.start();
    if (!client.blockUntilConnected(20, TimeUnit.SECONDS)) throw new IllegalStateException("no connection to " + args[0]);
    InterProcessLock lock = lockOf(client, args[1], args[2]);
    say("READY");
    if (args.length >= 5) {
      long holdMs = Long.parseLong(args[3]);
      int rounds = Integer.parseInt(args[4]);
      for (int round = 0; round < rounds; round++) {
        lock.acquire();
        long start = System.currentTimeMillis();
        Thread.sleep(holdMs);
        long end = System.currentTimeMillis();
        lock.release();
        say("HOLD " + start + " " + end);
      }
    } else {
      BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
      for (String line; (line = in.readLine()) != null; ) {
        if (line.equals("acquire")) {
          lock.acquire();
          say("HOLDING " + System.currentTimeMillis());
        } else if (line.equals("release")) {
          long now = System.currentTimeMillis();
          lock.release();
          say("RELEASED " + now);
        }
      }
    }
    client.close();
    say("CLOSED");
  }

  private static InterProcessLock lockOf(CuratorFramework client, String recipe, String path) {
    switch (recipe) {
      case "mutex": return new InterProcessMutex(client, path);
      case "read": return new InterProcessReadWriteLock(client, path).readLock();
      case "write": return new InterProcessReadWriteLock(client, path).writeLock();
      default: throw new IllegalArgumentException("recipe must be mutex, read or write: " + recipe);
    }
  }

  private static void say(String line) {
    System.out.println(line);
    System.out.flush();
  }
}
