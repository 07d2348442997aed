// needs: memory host, SQLite
/**
 * disk-hibernate.test's crash points on the in-memory host: `den serve` killed with SIGKILL
 * on its way to a disk hibernation and on its way back; after the restart the sandbox is
 * settled, its files kept, its boot a new one, its processes gone. The same file on real
 * microVMs runs the disk hibernation itself and the wake whose booted VM is adopted.
 */
process.env.DEN_DISK_HIBERNATE_HOST = "memory";
await import("./disk-hibernate.test.js");
