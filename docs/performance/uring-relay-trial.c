// Trial behind docs/performance.md's io_uring note: a 1-byte ping-pong
// through a relay process using epoll (mode 0) or io_uring (mode 1).
// Build and run (needs liburing-dev):
//   gcc -O2 uring-relay-trial.c -o relay -luring
//   taskset -c 0 ./relay 0; taskset -c 0 ./relay 1
// A minimal relay: client <-> relay <-> server, 1-byte round trips.
// mode 0: epoll_wait + recv + send; mode 1: io_uring (one recv armed per
// socket; each completion submits the send and re-arms the recv in one
// io_uring_enter that also waits).
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <sys/resource.h>
#include <time.h>
#include <liburing.h>
#include <poll.h>
static int N = 100000;
static double now(){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec/1e9;}
static void waitread(int fd,char*b){struct pollfd p={fd,POLLIN,0}; poll(&p,1,-1); if(read(fd,b,1)!=1) exit(2);}
static void relay_epoll(int a,int b){
  int ep=epoll_create1(0); struct epoll_event e={.events=EPOLLIN|EPOLLET};
  e.data.fd=a; epoll_ctl(ep,EPOLL_CTL_ADD,a,&e); e.data.fd=b; epoll_ctl(ep,EPOLL_CTL_ADD,b,&e);
  char buf[4096]; struct epoll_event ev[8];
  for(;;){int n=epoll_wait(ep,ev,8,-1); for(int i=0;i<n;i++){int fd=ev[i].data.fd; ssize_t r=recv(fd,buf,sizeof buf,MSG_DONTWAIT); if(r<=0) return; send(fd==a?b:a,buf,r,0);}}
}
static void relay_uring(int a,int b){
  struct io_uring ring; io_uring_queue_init(16,&ring,IORING_SETUP_SINGLE_ISSUER|IORING_SETUP_DEFER_TASKRUN);
  static char ba[4096], bb[4096], sa[4096], sb[4096];
  struct io_uring_sqe*s;
  s=io_uring_get_sqe(&ring); io_uring_prep_recv(s,a,ba,sizeof ba,0); io_uring_sqe_set_data64(s,1);
  s=io_uring_get_sqe(&ring); io_uring_prep_recv(s,b,bb,sizeof bb,0); io_uring_sqe_set_data64(s,2);
  io_uring_submit(&ring);
  for(;;){
    struct io_uring_cqe*c; if(io_uring_submit_and_wait(&ring,1)<0) return;
    unsigned head; int seen=0;
    io_uring_for_each_cqe(&ring,head,c){ seen++; unsigned long d=c->user_data; int r=c->res;
      if(d==1||d==2){ if(r<=0) return; int from=d==1?a:b, to=d==1?b:a; char*in=d==1?ba:bb; char*out=d==1?sa:sb; memcpy(out,in,r);
        s=io_uring_get_sqe(&ring); io_uring_prep_send(s,to,out,r,0); io_uring_sqe_set_data64(s,3); s->flags|=0;
        s=io_uring_get_sqe(&ring); io_uring_prep_recv(s,from,in,4096,0); io_uring_sqe_set_data64(s,d);} }
    io_uring_cq_advance(&ring,seen);
  }
}
int main(int argc,char**argv){int mode=atoi(argv[1]); int cr[2], rs[2]; socketpair(AF_UNIX,SOCK_STREAM,0,cr); socketpair(AF_UNIX,SOCK_STREAM,0,rs);
  pid_t relay=fork(); if(relay==0){ close(cr[0]); close(rs[1]); if(mode) relay_uring(cr[1],rs[0]); else relay_epoll(cr[1],rs[0]); exit(0);}
  pid_t server=fork(); if(server==0){ close(cr[0]); close(cr[1]); close(rs[0]); char x; for(;;){ struct pollfd p={rs[1],POLLIN,0}; poll(&p,1,-1); if(read(rs[1],&x,1)!=1) exit(0); write(rs[1],&x,1);} }
  close(cr[1]); close(rs[0]); close(rs[1]);
  char x='q'; double t0=now(); for(int i=0;i<N;i++){ write(cr[0],&x,1); waitread(cr[0],&x);} double t=now()-t0;
  close(cr[0]); int st; struct rusage ru; wait4(relay,&st,0,&ru); kill(server,9); waitpid(server,0,0);
  double cpu=ru.ru_utime.tv_sec+ru.ru_utime.tv_usec/1e6+ru.ru_stime.tv_sec+ru.ru_stime.tv_usec/1e6;
  printf("%s: RTT %.2f us, relay CPU %.2f us per message\n", mode?"io_uring":"epoll   ", t/N*1e6, cpu/(2.0*N)*1e6);}
