/* read(2) against recv(2) on a loopback TCP socket, timed side by side in one run: blocks of
 * N calls alternate between the two and the best block of each is kept (the machine is
 * shared; the best block is the one least disturbed). Two cases: the socket is empty (every
 * call is EAGAIN), and the peer sends 10 bytes before every call (a request's read). Used for
 * the record layer's `kernel::recv` (docs/PERFORMANCE.md, "Levers of round 3"): the kernel's
 * instructions cannot be counted on this VM (no PMU), so this is timed.
 *
 *   gcc -O2 -o /tmp/read_recv benches/ab/read_recv.c && taskset -c 1 /tmp/read_recv 2000 200
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void check(int ok, const char *what)
{
    if (!ok) {
        perror(what);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2000;
    int rounds = argc > 2 ? atoi(argv[2]) : 200;
    struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof addr;
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    check(listener >= 0 && bind(listener, (void *)&addr, sizeof addr) == 0 &&
          listen(listener, 1) == 0 && getsockname(listener, (void *)&addr, &len) == 0, "listen");
    int peer = socket(AF_INET, SOCK_STREAM, 0);
    check(peer >= 0 && connect(peer, (void *)&addr, sizeof addr) == 0, "connect");
    int sock = accept(listener, NULL, NULL);
    check(sock >= 0, "accept");
    int one = 1;
    setsockopt(peer, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    check(fcntl(sock, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
    char buf[4096];
    for (int with_data = 0; with_data < 2; with_data++) {
        double best[2] = { 1e18, 1e18 };
        for (int r = 0; r < rounds; r++) {
            for (int use_recv = 0; use_recv < 2; use_recv++) {
                double start = now_ns();
                for (int i = 0; i < n; i++) {
                    if (with_data)
                        check(send(peer, "0123456789", 10, 0) == 10, "send");
                    ssize_t got = use_recv ? recv(sock, buf, sizeof buf, 0)
                                           : read(sock, buf, sizeof buf);
                    if (with_data)
                        check(got == 10, "read 10 bytes");
                    else
                        check(got < 0 && errno == EAGAIN, "read EAGAIN");
                }
                double per_call = (now_ns() - start) / n;
                if (per_call < best[use_recv])
                    best[use_recv] = per_call;
            }
        }
        printf("%s: read %.1f ns, recv %.1f ns per call (best of %d blocks of %d), recv/read %.3f\n",
               with_data ? "10 bytes sent, then taken" : "empty socket (EAGAIN)", best[0],
               best[1], rounds, n, best[1] / best[0]);
    }
    return 0;
}
