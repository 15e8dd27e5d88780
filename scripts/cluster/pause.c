/* The pod sandbox's process, as Kubernetes' own build/pause/linux/pause.c does it: sit in
 * pause(), leave on SIGINT or SIGTERM, reap the pod's orphans. Built static by cluster.sh. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void leave(int sig) {
  (void)sig;
  _exit(0);
}

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction down = {0};
  down.sa_handler = leave;
  sigaction(SIGINT, &down, NULL);
  sigaction(SIGTERM, &down, NULL);
  struct sigaction child = {0};
  child.sa_handler = reap;
  child.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &child, NULL);
  for (;;) {
    pause();
  }
}
