/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>

#include "common/util.h"
#include "nvmf/proto/nvme.h"

const char *gdx_nvme_status_str(uint16_t status)
{
	switch (status & 0x7ff) {
	case GDX_NVME_SC_SUCCESS: return "Success";
	case GDX_NVME_SC_INVALID_OPCODE: return "Invalid Command Opcode";
	case GDX_NVME_SC_INVALID_FIELD: return "Invalid Field in Command";
	case GDX_NVME_SC_CMDID_CONFLICT: return "Command ID Conflict";
	case GDX_NVME_SC_DATA_XFER_ERROR: return "Data Transfer Error";
	case GDX_NVME_SC_INTERNAL: return "Internal Error";
	case GDX_NVME_SC_ABORT_REQ: return "Command Abort Requested";
	case GDX_NVME_SC_INVALID_NS: return "Invalid Namespace or Format";
	case GDX_NVME_SC_CMD_SEQ_ERROR: return "Command Sequence Error";
	case GDX_NVME_SC_SGL_INVALID_LAST: return "Invalid SGL Last Segment Descriptor";
	case GDX_NVME_SC_SGL_INVALID_COUNT: return "Invalid Number of SGL Descriptors";
	case GDX_NVME_SC_SGL_INVALID_DATA: return "Data SGL Length Invalid";
	case GDX_NVME_SC_SGL_INVALID_TYPE: return "SGL Descriptor Type Invalid";
	case GDX_NVME_SC_SGL_INVALID_OFFSET: return "SGL Offset Invalid";
	case GDX_NVME_SC_KA_TIMEOUT_INVALID: return "Keep Alive Timeout Invalid";
	case GDX_NVME_SC_NS_WRITE_PROTECTED: return "Namespace is Write Protected";
	case GDX_NVME_SC_TRANSIENT_TR_ERR: return "Transient Transport Error";
	case GDX_NVME_SC_LBA_RANGE: return "LBA Out of Range";
	case GDX_NVME_SC_CAP_EXCEEDED: return "Capacity Exceeded";
	case GDX_NVME_SC_NS_NOT_READY: return "Namespace Not Ready";
	case GDX_NVME_SC_ABORT_LIMIT: return "Abort Command Limit Exceeded";
	case GDX_NVME_SC_ASYNC_LIMIT: return "Asynchronous Event Request Limit Exceeded";
	case GDX_NVME_SC_INVALID_LOG_PAGE: return "Invalid Log Page";
	case GDX_NVME_SC_FEATURE_NOT_SAVEABLE: return "Feature Identifier Not Saveable";
	case GDX_NVME_SC_CONNECT_FORMAT: return "Connect Incompatible Format";
	case GDX_NVME_SC_CONNECT_CTRL_BUSY: return "Connect Controller Busy";
	case GDX_NVME_SC_CONNECT_INVALID_PARAM: return "Connect Invalid Parameters";
	case GDX_NVME_SC_CONNECT_RESTART_DISC: return "Connect Restart Discovery";
	case GDX_NVME_SC_CONNECT_INVALID_HOST: return "Connect Invalid Host";
	case GDX_NVME_SC_AUTH_REQUIRED: return "Authentication Required";
	case GDX_NVME_SC_WRITE_FAULT: return "Write Fault";
	case GDX_NVME_SC_READ_ERROR: return "Unrecovered Read Error";
	case GDX_NVME_SC_ACCESS_DENIED: return "Access Denied";
	case GDX_NVME_SC_INTERNAL_PATH: return "Internal Path Error";
	}
	return "Unknown Status";
}

int gdx_nvme_nqn_check(const char *field, size_t field_size)
{
	size_t n = strnlen(field, field_size);

	if (n == 0 || n == field_size || n > GDX_NVME_NQN_MAX)
		return -EINVAL;
	return (int)n;
}

void gdx_nvme_field_str(char *dst, size_t n, const char *field, size_t field_size)
{
	size_t len = strnlen(field, field_size);

	while (len && field[len - 1] == ' ')
		len--;
	if (!n)
		return;
	len = GDX_MIN(len, n - 1);
	memcpy(dst, field, len);
	dst[len] = 0;
}

void gdx_nvme_field_pad(char *field, size_t field_size, const char *s)
{
	size_t len = GDX_MIN(strlen(s), field_size);

	memcpy(field, s, len);
	memset(field + len, ' ', field_size - len);
}

uint16_t gdx_nvme_sgl_parse(const struct gdx_nvme_sqe *c, struct gdx_nvme_sgl_info *out)
{
	out->length = c->dptr.length;
	out->in_capsule = false;
	if ((c->flags & GDX_NVME_FLAGS_PSDT_MASK) != GDX_NVME_FLAGS_PSDT_SGL)
		return GDX_NVME_SC_INVALID_FIELD;
	/* nothing to transfer: the descriptor type does not matter (nvmet agrees) */
	if (!c->dptr.length && c->dptr.type != GDX_NVME_SGL_DATA_BLOCK_OFFSET)
		return GDX_NVME_SC_SUCCESS;
	/* Transport SGL Data Block: Linux uses subtype 0xA; nvmet takes any */
	if ((c->dptr.type >> 4) == (GDX_NVME_SGL_TRANSPORT >> 4))
		return GDX_NVME_SC_SUCCESS;
	switch (c->dptr.type) {
	case GDX_NVME_SGL_DATA_BLOCK_OFFSET:
		/* ICDOFF is 0: in-capsule data starts right after the SQE. */
		if (c->dptr.addr != 0)
			return GDX_NVME_SC_SGL_INVALID_OFFSET;
		out->in_capsule = true;
		return GDX_NVME_SC_SUCCESS;
	default:
		return GDX_NVME_SC_SGL_INVALID_TYPE;
	}
}
