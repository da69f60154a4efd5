"""Realistic generated material for the demo session: JSON records, CSV, logs, CJK text, a PDF, a large PNG.

Everything is generated from a seeded `random.Random`, so a demo run is reproducible.
"""

from __future__ import annotations

import io
import random
from collections.abc import Sequence
from typing import Any

_CUSTOMERS = (
    'Acme GmbH',
    'Globex Ltd',
    'Initech',
    'Umbrella SA',
    'Hooli',
    'Stark Industries',
    'Wayne Enterprises',
    'Soylent Corp',
    'Tyrell Corp',
    'Cyberdyne',
    '株式会社サンプル',
    '北京示例科技有限公司',
)
_SKUS = (
    'SKU-1001 USB-C dock',
    'SKU-1002 27in monitor',
    'SKU-1003 mechanical keyboard',
    'SKU-1004 laptop stand',
    'SKU-1005 noise-cancelling headset',
    'SKU-1006 webcam 4K',
    'SKU-1007 ergonomic chair',
    'SKU-1008 desk lamp',
)
_STATUSES = ('pending', 'paid', 'shipped', 'delivered', 'refund_requested', 'refunded', 'cancelled')
_SERVICES = ('payment-service', 'order-service', 'inventory-service', 'gateway')
_LOG_MESSAGES = (
    ('INFO', 'request completed status=200 duration_ms={ms}'),
    ('INFO', 'cache hit key=order:{id}'),
    ('DEBUG', 'retrying upstream call attempt={n} backoff_ms={ms}'),
    ('WARN', 'slow query on orders table duration_ms={ms} rows={n}'),
    ('ERROR', 'payment provider timeout after {ms}ms order_id=ORD-{id}'),
    ('ERROR', 'inventory reservation failed sku=SKU-10{n:02d} reason=insufficient_stock'),
)
_CJK_PHRASES = (
    '客户反馈订单延迟发货，要求尽快处理并提供物流单号。',
    '付款已经完成，但是系统仍然显示待支付状态。',
    '我们在法兰克福仓库发现库存数据不一致。',
    '请在本周五之前确认退款金额以及退款方式。',
    '注文した商品がまだ届いていません。配送状況を確認してください。',
    '請求書の金額が見積もりと異なっています。',
    '该问题已升级至二线支持团队，预计两个工作日内回复。',
    '顧客はキャンセルを希望しており、返金を求めています。',
)


def order_records(rng: random.Random, count: int, region: str) -> list[dict[str, Any]]:
    """`count` order records as a JSON API would return them."""
    records = []
    for _ in range(count):
        items: list[dict[str, Any]] = [
            {
                'sku': sku.split(' ', 1)[0],
                'name': sku.split(' ', 1)[1],
                'qty': rng.randint(1, 5),
                'unit_price': round(rng.uniform(9, 899), 2),
            }
            for sku in rng.sample(_SKUS, rng.randint(1, 3))
        ]
        records.append(
            {
                'order_id': f'ORD-{rng.randint(100000, 999999)}',
                'customer': rng.choice(_CUSTOMERS),
                'region': region,
                'status': rng.choice(_STATUSES),
                'created_at': f'2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}'
                f'T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z',
                'items': items,
                'total': round(sum(i['qty'] * i['unit_price'] for i in items), 2),
                'notes': rng.choice(
                    ('', 'gift wrap', 'deliver to reception', 'customer called twice', '加急处理')
                ),
            }
        )
    return records


def inventory_csv(rng: random.Random, rows: int, warehouse: str) -> str:
    lines = ['sku,name,warehouse,on_hand,reserved,reorder_level,unit_cost,updated_at']
    for _ in range(rows):
        sku = rng.choice(_SKUS)
        lines.append(
            f'{sku.split(" ", 1)[0]},"{sku.split(" ", 1)[1]}",{warehouse},'
            f'{rng.randint(0, 900)},{rng.randint(0, 80)},'
            f'{rng.randint(10, 100)},{rng.uniform(3, 500):.2f},2024-06-{rng.randint(1, 30):02d}'
        )
    return '\n'.join(lines)


def service_logs(rng: random.Random, lines: int, service: str) -> str:
    out = []
    for i in range(lines):
        level, template = rng.choice(_LOG_MESSAGES)
        message = template.format(
            ms=rng.randint(3, 30_000), id=rng.randint(100000, 999999), n=rng.randint(1, 9)
        )
        out.append(
            f'2024-06-14T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:'
            f'{rng.randint(0, 59):02d}.{i % 1000:03d}Z '
            f'{level:<5} {service} [req={rng.getrandbits(48):012x}] {message}'
        )
        if level == 'ERROR' and rng.random() < 0.3:
            out.append('Traceback (most recent call last):')
            out.append(f'  File "/srv/{service}/handlers.py", line {rng.randint(10, 400)}, in handle')
            out.append('    result = await client.call(payload, timeout=30)')
            out.append('TimeoutError: upstream did not answer in time')
    return '\n'.join(out)


def support_ticket(rng: random.Random, ticket_id: str, paragraphs: int) -> str:
    body = '\n\n'.join(''.join(rng.sample(_CJK_PHRASES, 4)) for _ in range(paragraphs))
    return (
        f'Ticket {ticket_id} (priority: {rng.choice(("low", "normal", "high", "urgent"))})\n'
        f'Customer: {rng.choice(_CUSTOMERS)}\nLanguage: zh/ja\n\n{body}\n\n'
        'Agent note: customer message quoted verbatim above; reply in the customer language.'
    )


def minimal_pdf(lines: Sequence[str]) -> bytes:
    """A valid one-page PDF whose text (Helvetica, ASCII) pdfminer can extract, built by hand."""

    def escape(text: str) -> str:
        return text.replace('\\', '\\\\').replace('(', '\\(').replace(')', '\\)')

    stream_lines = ['BT', '/F1 12 Tf', '14 TL', '72 740 Td']
    for line in lines:
        stream_lines.append(f'({escape(line)}) Tj T*')
    stream_lines.append('ET')
    stream = '\n'.join(stream_lines).encode('latin-1', errors='replace')
    objects = [
        b'<< /Type /Catalog /Pages 2 0 R >>',
        b'<< /Type /Pages /Kids [3 0 R] /Count 1 >>',
        b'<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R '
        b'/Resources << /Font << /F1 5 0 R >> >> >>',
        b'<< /Length ' + str(len(stream)).encode() + b' >>\nstream\n' + stream + b'\nendstream',
        b'<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>',
    ]
    out = bytearray(b'%PDF-1.4\n')
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f'{number} 0 obj\n'.encode() + body + b'\nendobj\n'
    xref = len(out)
    out += f'xref\n0 {len(objects) + 1}\n0000000000 65535 f \n'.encode()
    for offset in offsets:
        out += f'{offset:010d} 00000 n \n'.encode()
    out += f'trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n'.encode()
    return bytes(out)


def noise_png(width: int = 9_000, height: int = 3_000) -> bytes:
    """A grayscale noise PNG, larger than 2 MiB and wider than 8,000 px: an image a provider would refuse.

    The noise is drawn at a quarter of the size and scaled up, which keeps the file near 2.5 MiB (pure noise
    at full size would be 25 MiB and slow to write).
    """
    from PIL import Image

    image = Image.effect_noise((max(width // 4, 1), max(height // 4, 1)), 64).resize(
        (width, height), Image.Resampling.NEAREST
    )
    buffer = io.BytesIO()
    image.save(buffer, format='PNG', compress_level=1)
    return buffer.getvalue()
