/* The pod sandbox's process, like kubernetes build/pause/linux/pause.c: waits, reaps, exits on a signal. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static void sigdown(int signo) { exit(0); }
static void sigreap(int signo) { while (waitpid(-1, NULL, WNOHANG) > 0); }
int main(void) {
  struct sigaction a = {0};
  a.sa_handler = sigdown;
  sigaction(SIGINT, &a, NULL);
  sigaction(SIGTERM, &a, NULL);
  struct sigaction r = {0};
  r.sa_handler = sigreap;
  r.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &r, NULL);
  for (;;) pause();
  return 42;
}
