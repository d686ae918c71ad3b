"""Packaging for tunix_agentic: every setting is read from `settings.ini`, as in nbdev 2 projects."""
from configparser import ConfigParser
import setuptools

config = ConfigParser(delimiters=['='])
config.read('settings.ini', encoding='utf-8')
cfg = config['DEFAULT']

expected = ('version description keywords author author_email branch license status min_python '
            'audience language').split()
missing = [o for o in expected if o not in cfg]
if missing: raise ValueError(f'settings.ini is missing {missing}')
setup_cfg = {o: cfg[o] for o in 'version description keywords author author_email'.split()}

statuses = ['1 - Planning', '2 - Pre-Alpha', '3 - Alpha', '4 - Beta', '5 - Production/Stable',
            '6 - Mature', '7 - Inactive']
py_versions = '3.12'.split()
min_python = cfg['min_python']

def split_reqs(key):
    "Requirements are space-separated in settings.ini."
    return cfg.get(key, '').split()

# every `<name>_requirements` key of settings.ini is the extra `<name>` (cpu, tpu, dev, tensorboard, ...)
extras = {k[:-len('_requirements')]: split_reqs(k) for k in cfg if k.endswith('_requirements')}
setuptools.setup(
    name=cfg['lib_name'],
    license='Apache-2.0',
    classifiers=['Development Status :: ' + statuses[int(cfg['status'])],
                 'Intended Audience :: ' + cfg['audience'].title(),
                 'Natural Language :: ' + cfg['language'].title()]
                + ['Programming Language :: Python :: ' + o for o in py_versions],
    url=cfg['git_url'],
    packages=setuptools.find_packages(include=['tunix_agentic', 'tunix_agentic.*']),
    include_package_data=True,
    package_data={'tunix_agentic': ['assets/*', 'presets/*.yaml']},
    install_requires=split_reqs('requirements'),
    extras_require=extras,
    dependency_links=cfg.get('dep_links', '').split(),
    python_requires='>=' + min_python,
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    zip_safe=False,
    entry_points={
        'console_scripts': cfg.get('console_scripts', '').split(),
        'nbdev': [f'{cfg.get("lib_path")}={cfg.get("lib_path")}._modidx:d'],
    },
    **setup_cfg)
