/* net.setup: the guest's side of a sandbox network, done here with ioctls rather than by
 * running `ip` (a new program in a new VM costs hundreds of milliseconds under TCG, and an
 * open network's create waits for this). */
#define _GNU_SOURCE
#include "agent.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <net/route.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

static int parse_mac(const char *s, unsigned char mac[6])
{
	unsigned v[6];
	char end;
	if (sscanf(s, "%2x:%2x:%2x:%2x:%2x:%2x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &end) != 6)
		return -1;
	for (int i = 0; i < 6; i++)
		mac[i] = (unsigned char)v[i];
	return 0;
}

static void sin_set(struct sockaddr *sa, struct in_addr a)
{
	struct sockaddr_in *in = (struct sockaddr_in *)sa;
	memset(in, 0, sizeof *in);
	in->sin_family = AF_INET;
	in->sin_addr = a;
}

static int set_flags(int s, struct ifreq *ifr, int up)
{
	if (ioctl(s, SIOCGIFFLAGS, ifr))
		return -1;
	if (up)
		ifr->ifr_flags |= IFF_UP;
	else
		ifr->ifr_flags &= ~IFF_UP;
	return ioctl(s, SIOCSIFFLAGS, ifr);
}

/* { dev, mac, address, prefix, gateway, dns }: the link down, its MAC set, up again, its
 * address (the primary one, replaced), the default route replaced, resolv.conf written. */
int op_net_setup(struct req *r)
{
	const char *dev, *mac_s, *addr_s, *gw_s, *dns_s;
	int64_t prefix;
	unsigned char mac[6];
	struct in_addr addr, gw, dns, mask;
	if (arg_str(r, "dev", &dev, 1) < 0 || arg_str(r, "mac", &mac_s, 1) < 0 || arg_str(r, "address", &addr_s, 1) < 0 ||
	    arg_int(r, "prefix", &prefix, 1) < 0 || arg_str(r, "gateway", &gw_s, 1) < 0 || arg_str(r, "dns", &dns_s, 1) < 0)
		return -1;
	if (strlen(dev) >= IFNAMSIZ || parse_mac(mac_s, mac) || inet_pton(AF_INET, addr_s, &addr) != 1 ||
	    inet_pton(AF_INET, gw_s, &gw) != 1 || inet_pton(AF_INET, dns_s, &dns) != 1 || prefix < 1 || prefix > 30)
		return req_err(r, "invalid_argument", "net.setup: bad dev, mac, address, prefix, gateway or dns");
	mask.s_addr = htonl(~0u << (32 - prefix));
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return req_errno(r, errno, "socket");
	struct ifreq ifr;
	const char *step = "down";
	memset(&ifr, 0, sizeof ifr);
	strcpy(ifr.ifr_name, dev);
	if (set_flags(s, &ifr, 0))
		goto failed;
	step = "mac";
	ifr.ifr_hwaddr.sa_family = ARPHRD_ETHER;
	memcpy(ifr.ifr_hwaddr.sa_data, mac, 6);
	if (ioctl(s, SIOCSIFHWADDR, &ifr))
		goto failed;
	step = "up";
	if (set_flags(s, &ifr, 1))
		goto failed;
	step = "address";
	sin_set(&ifr.ifr_addr, addr);
	if (ioctl(s, SIOCSIFADDR, &ifr))
		goto failed;
	step = "netmask";
	sin_set(&ifr.ifr_netmask, mask);
	if (ioctl(s, SIOCSIFNETMASK, &ifr))
		goto failed;
	/* Replace: every default route goes, then ours. */
	struct rtentry rt;
	struct in_addr any = {0};
	for (int i = 0; i < 64; i++) {
		memset(&rt, 0, sizeof rt);
		sin_set(&rt.rt_dst, any);
		sin_set(&rt.rt_genmask, any);
		if (ioctl(s, SIOCDELRT, &rt))
			break;
	}
	step = "route";
	memset(&rt, 0, sizeof rt);
	sin_set(&rt.rt_dst, any);
	sin_set(&rt.rt_genmask, any);
	sin_set(&rt.rt_gateway, gw);
	rt.rt_flags = RTF_UP | RTF_GATEWAY;
	rt.rt_dev = (char *)dev;
	if (ioctl(s, SIOCADDRT, &rt))
		goto failed;
	close(s);
	char line[64];
	int n = snprintf(line, sizeof line, "nameserver %s\n", dns_s);
	int fd = open("/etc/resolv.conf", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return req_errno(r, errno, "/etc/resolv.conf");
	ssize_t w = write(fd, line, (size_t)n);
	int e = errno;
	close(fd);
	if (w != n)
		return req_errno(r, w < 0 ? e : EIO, "/etc/resolv.conf");
	return 0;
failed:;
	int err = errno;
	close(s);
	return req_errno(r, err, step);
}
